"""cugraph-accel: verified CUDA graphs for the decode step of Hugging Face causal LMs."""

__version__ = "0.1.0"
