"""`capture --fuse`: the decoder layers compiled by inductor (one compilation per layer class and batch
class, layers), batch-1 projections lowered to GEMV kernels (gemv_lowering), and grouped-query decode
attention (grouped_attention); the compiled step is then captured by the core like any other."""
