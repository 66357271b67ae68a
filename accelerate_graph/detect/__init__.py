"""What in a decode step cannot live in a graph, and what to do about it: hazards found by running two
eager steps under a dispatch mode (hazards), the fixes that keep the step whole (fixes/, one file
each, listed in MODEL_FIXES), and the region plan: full, graph segments around eager islands, or
eager (regions)."""
