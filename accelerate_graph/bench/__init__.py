"""`bench`: the contenders (contenders/, one file each, listed in CONTENDERS) timed per cache length and
batch against the hardware floor (floor: bytes a step moves over measured bandwidth), with the timing
method (timing), the torch.compile step (compiled_step), whole generate calls (generate), and the
report: rows, JSON/CSV files and the plot."""
