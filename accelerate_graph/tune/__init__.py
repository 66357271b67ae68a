"""`cugraph-accel tune MODEL`: the skinny kernels' configs chosen on the GPU at hand, for MODEL's shapes.

`model_shapes` reads MODEL's layer shapes (no weights loaded), `grids` holds the configs tried, `chain` times
them in a chain of decoder layers replayed as one CUDA graph, `sweep` walks the grids (coordinate descent, op
by op) and `table` merges what won into the user's table for this GPU (fused/kernels/configs reads it).
"""
