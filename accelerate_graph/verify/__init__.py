"""Proof that replay equals eager: the same decode steps from the same cache state, logits and cache
compared per bucket, padded batch and context-bucket boundary, within per-dtype tolerances."""
