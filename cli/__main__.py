"""`python -m cli`: the same entry point as the `cugraph-accel` script."""

from .entry import main

if __name__ == "__main__":  # --tp ranks start by importing this module again (spawn): they must not rerun the app
    main()
