"""The layers stay layers: parsed imports (with `ast`, lazy and TYPE_CHECKING ones included) of every
module under accelerate_graph/, checked against the dependency direction docs/ARCHITECTURE.md draws."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# What the capture core must not know: the features built on it, and the commands.
FEATURES = ("fused", "bench", "zoo", "detect", "verify", "generate", "distributed", "pipeline", "capture_flow")
CORE = "accelerate_graph.core"
# The lowest layer: plumbing and the one home of transformers/torch internals. They import only each other.
LOWEST = ("accelerate_graph.common", "accelerate_graph.compat")
ABOVE_LOWEST = ("models", "core", *FEATURES)


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_names(path: Path, root: Path) -> list[tuple[str, int]]:
    """Every module a file imports, as dotted names with their line: `from a import b` gives a.b too
    (b may be a module), relative imports resolved against the file's package."""
    module = module_name(path, root)
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    names = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            names += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            source = ".".join(base + ([node.module] if node.module else []))
            names += [(source, node.lineno)] + [(f"{source}.{a.name}", node.lineno) for a in node.names]
    return names


def _inside(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def broken_rule(module: str, imported: str) -> str | None:
    """Which rule `module` importing `imported` breaks, or None."""
    if _inside(module, "accelerate_graph") and _inside(imported, "cli"):
        return "a library module imports the CLI"
    if any(_inside(module, low) for low in LOWEST):
        above = next((f for f in ABOVE_LOWEST if _inside(imported, f"accelerate_graph.{f}")), None)
        if above:
            return f"the lowest layer (common, compat) imports a layer above it ({above})"
    if _inside(module, CORE):
        feature = next((f for f in FEATURES if _inside(imported, f"accelerate_graph.{f}")), None)
        if feature:
            return f"the capture core imports a feature ({feature})"
    return None


def layering_violations(root: Path) -> list[str]:
    found = []
    for path in sorted((root / "accelerate_graph").rglob("*.py")):
        module = module_name(path, root)
        for imported, line in imported_names(path, root):
            rule = broken_rule(module, imported)
            if rule:
                found.append(f"{module} (line {line}) imports {imported}: {rule}")
    return list(dict.fromkeys(found))  # `from a import b` names a and a.b: one line per rule broken


def next_slot_writers(root: Path) -> list[str]:
    """Modules that assign the cache's host write slot (`x.next_slot = ...` or `+=`) other than its owner."""
    found = []
    for path in sorted((root / "accelerate_graph").rglob("*.py")):
        if path.relative_to(root).as_posix() == "accelerate_graph/core/static_cache.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
            if isinstance(node, (ast.Assign, ast.AugAssign)):
                for target in targets:
                    if isinstance(target, ast.Attribute) and target.attr == "next_slot":
                        found.append(f"{module_name(path, root)} (line {node.lineno}) writes next_slot")
    return found


def test_no_layer_imports_upwards():
    assert layering_violations(ROOT) == []


def test_only_the_cache_moves_its_write_slot():
    assert next_slot_writers(ROOT) == []


def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return tmp_path


def test_the_checks_fail_naming_the_module_and_the_import(tmp_path):
    root = _tree(
        tmp_path,
        {
            "accelerate_graph/__init__.py": "",
            "accelerate_graph/core/__init__.py": "from . import capture\n",
            "accelerate_graph/core/capture.py": (
                "from accelerate_graph.bench.run import run_bench\n"
                "from ..fused import layers\n"
                "def lazy():\n    from accelerate_graph import pipeline\n"
                "def step(kv):\n    kv.next_slot += 1\n"
            ),
            "accelerate_graph/core/plan.py": "from accelerate_graph.common.errors import PlanError\n",
            "accelerate_graph/bench/run.py": "import cli.main\nfrom accelerate_graph.core import capture\n",
        },
    )
    assert layering_violations(root) == [
        "accelerate_graph.bench.run (line 1) imports cli.main: a library module imports the CLI",
        "accelerate_graph.core.capture (line 1) imports accelerate_graph.bench.run: the capture core imports a "
        "feature (bench)",
        "accelerate_graph.core.capture (line 1) imports accelerate_graph.bench.run.run_bench: the capture core "
        "imports a feature (bench)",
        "accelerate_graph.core.capture (line 2) imports accelerate_graph.fused: the capture core imports a "
        "feature (fused)",
        "accelerate_graph.core.capture (line 2) imports accelerate_graph.fused.layers: the capture core imports "
        "a feature (fused)",
        "accelerate_graph.core.capture (line 4) imports accelerate_graph.pipeline: the capture core imports a "
        "feature (pipeline)",
    ]
    assert next_slot_writers(root) == ["accelerate_graph.core.capture (line 6) writes next_slot"]


@pytest.mark.parametrize(
    ("module", "imported", "broken"),
    [
        ("accelerate_graph.core.capture", "accelerate_graph.detect.hazards", True),
        ("accelerate_graph.core.capture", "accelerate_graph.verify", True),
        ("accelerate_graph.core.capture", "accelerate_graph.core.buckets", False),
        ("accelerate_graph.core.capture", "accelerate_graph.common.errors", False),
        ("accelerate_graph.core.capture", "accelerate_graph.fusedness", False),
        ("accelerate_graph.core.capture", "accelerate_graph.generate.loop", True),
        ("accelerate_graph.core.capture", "accelerate_graph.distributed.rank", True),
        ("accelerate_graph.core.capture", "accelerate_graph.compat.torch_internals", False),
        ("accelerate_graph.compat.torch_internals", "accelerate_graph.common.errors", False),
        ("accelerate_graph.compat.torch_internals", "accelerate_graph.core.plan", True),
        ("accelerate_graph.common.environment", "accelerate_graph", False),  # the package's __version__
        ("accelerate_graph.common.errors", "accelerate_graph.models.loading", True),  # a prefix is not a package
        ("accelerate_graph.bench.run", "accelerate_graph.pipeline", False),
        ("accelerate_graph.zoo.run", "cli", True),
        ("cli.main", "accelerate_graph.pipeline", False),
    ],
)
def test_rules(module, imported, broken):
    assert (broken_rule(module, imported) is not None) == broken
