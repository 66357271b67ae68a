"""`cugraph-accel eval`: task fidelity of eager, graph and fused decoding against a float32 reference."""
