"""`zoo`: every decoder-only causal-LM type transformers knows, built tiny from its config and run
through detect, capture and verify in a child process each, summarised as a matrix (docs/ZOO.md)."""
