"""Hand-written Triton kernels that fused mode calls from inside its compiled decoder layers."""
