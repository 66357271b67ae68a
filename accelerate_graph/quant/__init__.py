"""FP8 (e4m3) weights under the graphs: the format, the layer, model quantization and FP8 checkpoints."""
