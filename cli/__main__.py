"""`python -m cli`: the same app as the `cugraph-accel` script."""

from .main import app

app(prog_name="cugraph-accel")
