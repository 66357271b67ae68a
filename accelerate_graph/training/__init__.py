"""Small causal LMs trained here on real text (the Python standard library's sources), so that engine numbers
can be shown on trained weights: a committed CPU-sized model for tests, larger ones trained on a GPU.

`python -m accelerate_graph.training NAME --out DIR` trains one (`--list` names them); each folder holds the
model, its tokenizer and `training.json` (held-out loss beside a unigram model's on the same tokens).
"""
