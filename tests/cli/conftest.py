"""The CLI tests run in a folder of their own: a command without --plan writes ./cugraph-accel.plan.yaml, and
two tests capturing there at once (pytest-xdist's workers) would meet the plan's lock, not their own error."""

import pytest


@pytest.fixture(autouse=True)
def own_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
