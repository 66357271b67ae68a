"""The capture core: the static decode session (fixed input buffers and one shared static KV cache,
which alone moves its write slot), batch and context buckets, capture of one graph per (batch, context)
bucket and dispatch of each step to its graph, the graph backends chosen by name (backends/), and the
plan file. Also the pieces capture and detection share: which ops read device data on the host
(host_reads), which submodule is running (module_stack), constants served from outside the graph
(host_constants). It knows no feature: detect, verify, fused, bench, zoo and pipeline build on it,
never the reverse (tests/test_layering.py)."""
