"""`python -m cli`: the same entry point as the `cugraph-accel` script."""

from .entry import main

main()
