"""docs/ARCHITECTURE.md's "how to add" lines stay true: its example files define what the registries
take, and its registry lines are the registries as they are, plus the example."""

from __future__ import annotations

import re
from pathlib import Path

import accelerate_graph.bench.contenders as contenders
import accelerate_graph.detect.fixes as fixes
from accelerate_graph.bench.contenders import Contender
from accelerate_graph.detect.fixes import ModelFix

DOC = Path(__file__).resolve().parents[1] / "docs" / "ARCHITECTURE.md"


def _python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), flags=re.S)


def _listed(block: str, registry: str) -> list[str]:
    inside = re.search(rf"{registry} = \((.*?)\)", block, flags=re.S).group(1)
    return [name.strip() for name in inside.split(",") if name.strip()]


def _names(package, entries) -> list[str]:
    """The module-level names under which `package` holds its registry's entries."""
    return [next(k for k, v in vars(package).items() if v is entry and k.isupper()) for entry in entries]


def test_the_example_contender_and_its_registry_line():
    new_file, registry_line = [b for b in _python_blocks() if "CONTENDERS = (" in b or "Contender(" in b]
    scope: dict = {}
    exec(compile(new_file, "twice.py", "exec"), scope)  # noqa: S102 - the doc's own example
    assert isinstance(scope["TWICE"], Contender) and scope["TWICE"].step is not None
    assert _listed(registry_line, "CONTENDERS") == [*_names(contenders, contenders.CONTENDERS), "TWICE"]


def test_the_example_fix_and_its_registry_line():
    new_file, registry_line = [b for b in _python_blocks() if "MODEL_FIXES = (" in b or "ModelFix(" in b]
    scope: dict = {}
    exec(compile(new_file, "my_fix.py", "exec"), scope)  # noqa: S102 - the doc's own example
    assert isinstance(scope["MY_FIX"], ModelFix)
    assert scope["MY_FIX"].apply(None, [], lambda: []) == (None, [])  # no hazard of its kind: nothing done
    assert _listed(registry_line, "MODEL_FIXES") == [*_names(fixes, fixes.MODEL_FIXES), "MY_FIX"]
