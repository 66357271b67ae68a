"""Hand-written Triton kernels for the decode step's projections.

`skinny_matmul`: matmuls whose input has few rows (the batch bucket, 1..32), out = x @ W^T, each weight read
once per call whatever the row count, with their neighbours folded in: the RMSNorm before q/k/v and
gate/up, the residual add after o_proj and down_proj, the activation between gate/up and down. Registered
as `torch.ops.cugraph_accel.*` custom ops (torch.library.triton_op) so inductor traces them inside a
compiled layer and a CUDA graph records them; a pure-torch reference with the same rounding runs where
Triton cannot (no triton, not a CUDA tensor). `skinny_kernels` holds the Triton code, `configs` the
launch configs (a table per GPU that `cugraph-accel tune` writes; a heuristic for missing shapes). Fused
mode runs them at batch 1 for the shapes the table has, and above batch 1 for the shapes and rows where they
beat cuBLAS (fused/layer_program.py).

`decode_attention`: one query token per row against the cache, the query heads of a group sharing each
K/V tile, online softmax, split over the context when it is long (setting `triton_attention`, on). An opaque
custom op with a flexible layout: inductor calls it at run time, with the strides its inputs really have
(the cache's own, not a copy). Its splits are combined by a second kernel; short buckets at small batches
run as one kernel that loads K and V before its PDL wait (settings `attention_preloaded*`).

`decode_mask`: the decode step's attention mask as one kernel (setting `mask_kernel`).

`arrival`: the counters with which the last program of a group runs the group's second pass itself
(split-K's finish above `skinny_matmul.FINISH_HERE_ABOVE_ROWS` rows).

`pdl`: programmatic dependent launch for all of them (and for inductor's kernels, through fused.layers), on
by default on Hopper GPUs (setting `pdl`); the skinny ops then run as opaque twins (`*_pdl`), since inductor
does not pass `launch_pdl` to a triton_op's kernels. Launched early, the skinny matmuls first ask L2
(`skinny_kernels._prefetch_first_block`) for their first block of weights, which the kernel before them does
not write.
"""
