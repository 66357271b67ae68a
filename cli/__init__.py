"""The cugraph-accel command line: wiring only; the work lives in accelerate_graph."""
