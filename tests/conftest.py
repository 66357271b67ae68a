"""Shared fixtures (the tiny model builders live in tiny_models.py) and the test tiers (tiers.py)."""

from __future__ import annotations

import os
import shlex
import warnings

import pytest
import tiers
from tiny_models import save_tiny_model

_ADDOPTS = "PYTEST_ADDOPTS"
_saved_addopts = pytest.StashKey[str | None]()


def pytest_configure(config):
    # Some tests run a file's tests again in a child pytest (the Triton interpreter's fresh process): the
    # child inherits this environment, so it selects the same tier as this run.
    markexpr = config.getoption("markexpr")
    if markexpr:
        config.stash[_saved_addopts] = os.environ.get(_ADDOPTS)
        os.environ[_ADDOPTS] = f"{os.environ.get(_ADDOPTS, '')} -m {shlex.quote(markexpr)}".strip()


def pytest_unconfigure(config):
    if _saved_addopts in config.stash:
        saved = config.stash[_saved_addopts]
        if saved is None:
            os.environ.pop(_ADDOPTS, None)
        else:
            os.environ[_ADDOPTS] = saved


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects by marker
def pytest_collection_modifyitems(config, items):
    for item in items:
        if tiers.tier_of(item.nodeid) == "exhaustive":
            item.add_marker(pytest.mark.exhaustive)
    if config.args_source == pytest.Config.ArgsSource.TESTPATHS:  # the whole suite was collected
        for entry in tiers.unmatched([item.nodeid for item in items]):
            warnings.warn(
                pytest.PytestWarning(f"tests/tiers.py: {entry.pattern!r} matches no test; fix or remove it"),
                stacklevel=1,
            )


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    """model_type -> a saved tiny model folder (built once per session)."""
    made: dict[str, str] = {}

    def get(model_type: str) -> str:
        if model_type not in made:
            made[model_type] = save_tiny_model(model_type, tmp_path_factory.mktemp(f"tiny-{model_type}"))
        return made[model_type]

    return get
