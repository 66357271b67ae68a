"""`python -m cli`: the same app as the `cugraph-accel` script."""

from .main import app

if __name__ == "__main__":  # --tp ranks start by importing this module again (spawn): they must not rerun the app
    app(prog_name="cugraph-accel")
