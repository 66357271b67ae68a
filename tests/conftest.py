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


_TERMINAL_SIZE = ("COLUMNS", "LINES")


def pytest_configure(config):
    # pytest-xdist (make test): a worker's environment says 80 x 24 where its controller's said nothing (the
    # CLI then wraps its output as in a terminal); it gets the controller's values back
    worker = getattr(config, "workerinput", None)
    for name, value in (worker or {}).get("terminal_size", {}).items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    # the workers share the cores, so each takes its share for torch's threads
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1)
    if workers > 1:
        import torch

        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
        torch.set_num_threads(max(1, cores // workers))
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


def _whole_suite(config) -> bool:
    """Whether this run collects every test (no paths given); an xdist worker is told by its controller."""
    worker = getattr(config, "workerinput", None)
    if worker is not None:
        return bool(worker.get("whole_suite"))
    return config.args_source == pytest.Config.ArgsSource.TESTPATHS


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node):  # pytest-xdist's controller, for each worker it starts
    node.workerinput["whole_suite"] = _whole_suite(node.config)
    node.workerinput["terminal_size"] = {name: os.environ.get(name) for name in _TERMINAL_SIZE}


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects by marker
def pytest_collection_modifyitems(config, items):
    distributed = config.pluginmanager.hasplugin("xdist")
    for item in items:
        if tiers.tier_of(item.nodeid) == "exhaustive":
            item.add_marker(pytest.mark.exhaustive)
        if distributed and item.get_closest_marker("cuda"):  # --dist loadgroup: one worker, one GPU user
            item.add_marker(pytest.mark.xdist_group("cuda"))
    if _whole_suite(config):
        for entry in tiers.unmatched([item.nodeid for item in items]):
            warnings.warn(
                pytest.PytestWarning(f"tests/tiers.py: {entry.pattern!r} matches no test; fix or remove it"),
                stacklevel=1,
            )


@pytest.fixture
def one_torch_thread():
    """Torch on one thread for a test: on a shared two-core machine two threads spin against each other (a
    folder's conftest makes it autouse where its tests are many small torch calls)."""
    import torch

    saved = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(saved)


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    """model_type -> a saved tiny model folder (built once per session)."""
    made: dict[str, str] = {}

    def get(model_type: str) -> str:
        if model_type not in made:
            made[model_type] = save_tiny_model(model_type, tmp_path_factory.mktemp(f"tiny-{model_type}"))
        return made[model_type]

    return get
