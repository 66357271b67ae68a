"""Every transformers/torch internal is used only inside accelerate_graph/compat/: this scans every other
module of the package (with `ast`) and fails naming file:line of each use it finds.

What counts as an internal (what a torch or transformers release may change without notice):
- an import of a module or name with a `_`-prefixed part (`torch._dynamo`, `torch.utils._pytree`,
  `from torch._inductor import config`), or of an experimental or undocumented module
  (`torch.fx.experimental`, `MODEL_FOR_CAUSAL_LM_MAPPING_NAMES`);
- a `_`-prefixed attribute read or written on anything but `self`/`cls` (`torch._C`, `tensor._version`,
  `config._attn_implementation`), unless the name is one this package defines itself; aten op names
  (`torch.ops.aten._to_copy`) are the dispatcher's public names and `sys._getframe` is Python's;
- `getattr`/`setattr`/`hasattr`/`delattr` with a `_`-prefixed attribute name;
- `__new__` or `__dict__`, and `copy.copy`/`copy.deepcopy` (objects assembled around their constructor);
- an instance `forward` assigned or deleted, and `layer_idx`/`layer_id` written or named (upstream
  modules rewired from outside).
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "accelerate_graph"
COMPAT = PACKAGE / "compat"

UNDOCUMENTED = {"experimental", "MODEL_FOR_CAUSAL_LM_MAPPING_NAMES"}  # internals without a leading `_`
PYTHONS_OWN = {"sys", "os", "multiprocessing"}  # roots whose private names are Python's, not torch's
# Known uses still to move into compat (file, what): each is reported by name if it changes or spreads.
OUTSTANDING = {
    ("accelerate_graph/generate/dropin.py", "uses model.__dict__"),
    ("accelerate_graph/generate/dropin.py", "uses self.model.__dict__"),
}
REWIRED = {"forward", "layer_idx", "layer_id"}  # attributes of upstream modules we must not set from outside
COPIES = {"copy", "deepcopy"}


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _root(node: ast.AST) -> ast.AST:
    while isinstance(node, (ast.Attribute, ast.Subscript, ast.Call)):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node


def _is_self(node: ast.AST) -> bool:
    return isinstance(node, ast.Name) and node.id in ("self", "cls")


def _module_files() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if COMPAT not in p.parents)


def own_private_names(sources: list[str]) -> set[str]:
    """`_`-prefixed names this package defines: functions, classes, module globals, `self._x` attributes."""
    names = set()
    for source in sources:
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names.add(node.id)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store) and _is_self(node.value):
                names.add(node.attr)
    return {name for name in names if _private(name)}


def _upstream_names(tree: ast.AST) -> set[str]:
    """Names bound by imports from torch or transformers (`torch`, `nn`, `StaticLayer`, ...)."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {
                (alias.asname or alias.name).split(".")[0]
                for alias in node.names
                if alias.name.split(".")[0] in ("torch", "transformers")
            }
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in ("torch", "transformers"):
            names |= {alias.asname or alias.name for alias in node.names}
    return names


def _op_namespaces(tree: ast.AST) -> set[str]:
    """Names bound to `torch.ops...` (e.g. `aten = torch.ops.aten`): their `_` ops are aten's op names."""
    return {
        target.id
        for node in ast.walk(tree)
        if isinstance(node, ast.Assign) and ast.unparse(node.value).startswith("torch.ops")
        for target in node.targets
        if isinstance(target, ast.Name)
    }


def _import_hits(node: ast.AST) -> list[str]:
    if isinstance(node, ast.Import):
        modules = [alias.name for alias in node.names]
    elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
        modules = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
    else:
        return []
    upstream = [m for m in modules if m.split(".")[0] in ("torch", "transformers")]
    bad = [m for m in upstream if any(_private(part) or part in UNDOCUMENTED for part in m.split("."))]
    return [f"imports {bad[-1]}"] if bad else []


def _attribute_hits(node: ast.Attribute, own: set[str], ops: set[str], upstream: set[str]) -> list[str]:
    if node.attr in ("__new__", "__dict__"):
        return [f"uses {ast.unparse(node)}"]
    if isinstance(node.ctx, (ast.Store, ast.Del)) and node.attr in REWIRED and not _is_self(node.value):
        return [f"rewires {ast.unparse(node)}"]
    if not _private(node.attr) or _is_self(node.value):
        return []
    root = _root(node)
    root_name = root.id if isinstance(root, ast.Name) else ""
    if ast.unparse(node.value).startswith("torch.ops") or root_name in ops | PYTHONS_OWN:
        return []
    if node.attr in own and root_name not in upstream:  # our own name, on our own object
        return []
    return [f"reaches into {ast.unparse(node)}"]


def _call_hits(node: ast.Call) -> list[str]:
    func = node.func
    if isinstance(func, ast.Name) and func.id in ("getattr", "setattr", "hasattr", "delattr") and len(node.args) > 1:
        name = node.args[1]
        stdlib = isinstance(_root(node.args[0]), ast.Name) and _root(node.args[0]).id in PYTHONS_OWN
        if isinstance(name, ast.Constant) and isinstance(name.value, str) and _private(name.value) and not stdlib:
            return [f"{func.id}(..., {name.value!r})"]
        if isinstance(name, ast.Constant) and name.value in REWIRED and func.id in ("setattr", "delattr"):
            return [f"rewires {name.value} with {func.id}"]
    if isinstance(func, ast.Attribute) and func.attr in COPIES and ast.unparse(func.value) == "copy":
        return [f"copy.{func.attr}(...) (copies an object's __dict__ around its constructor)"]
    return []


def find_internals(source: str, filename: str, own: set[str]) -> list[str]:
    """`filename:line: what` for each internal the source uses."""
    tree = ast.parse(source, filename)
    ops, upstream = _op_namespaces(tree), _upstream_names(tree)
    hits = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found = _import_hits(node)
        elif isinstance(node, ast.Attribute):
            found = _attribute_hits(node, own, ops, upstream)
        elif isinstance(node, ast.Call):
            found = _call_hits(node)
        elif isinstance(node, ast.Constant) and node.value in ("layer_idx", "layer_id"):
            found = [f"names {node.value!r} (an attention module's cache index, rewired only in compat)"]
        else:
            continue
        hits += [f"{filename}:{node.lineno}: {what}" for what in found]
    return sorted(set(hits))


def test_no_torch_or_transformers_internal_outside_compat():
    files = _module_files()
    assert len(files) > 30, f"found only {len(files)} modules under {PACKAGE}"
    own = own_private_names([path.read_text() for path in files])
    hits = [
        hit for path in files for hit in find_internals(path.read_text(), str(path.relative_to(PACKAGE.parent)), own)
    ]
    hits = [hit for hit in hits if (hit.split(":")[0], hit.split(": ", 1)[1]) not in OUTSTANDING]
    assert not hits, "internals used outside accelerate_graph/compat/ (wrap each in a compat function):\n" + "\n".join(
        hits
    )


PLANTED = {
    "import torch._dynamo": "imports torch._dynamo",
    "from torch.utils._pytree import tree_flatten": "imports torch.utils._pytree.tree_flatten",
    "from torch._inductor import config": "imports torch._inductor.config",
    "from torch.fx.experimental.symbolic_shapes import guard_size_oblivious": "imports torch.fx.experimental",
    "import torch\nx = torch._C.DisableTorchFunction()": "reaches into torch._C",
    "import torch\nclass A:\n    def __init__(self):\n        self._ops = []\nf: torch._ops.OpOverload": "torch._ops",
    "INDEX = ('layer_idx', 'layer_id')": "names 'layer_idx'",
    "def f(t):\n    return t._version": "reaches into t._version",
    "def f(model):\n    model.config._attn_implementation = 'x'": "reaches into model.config._attn_implementation",
    "def f(c):\n    return getattr(c, '_experts_implementation', None)": "getattr(..., '_experts_implementation')",
    "def f(cls_, layer):\n    v = cls_.__new__(cls_)\n    v.__dict__.update(layer.__dict__)": "uses cls_.__new__",
    "import copy\ndef f(layer):\n    return copy.copy(layer)": "copy.copy(...)",
    "def f(layer, g):\n    layer.forward = g": "rewires layer.forward",
    "def f(layer):\n    del layer.forward": "rewires layer.forward",
    "def f(attn):\n    attn.layer_idx = 0": "rewires attn.layer_idx",
    "def f(m):\n    setattr(m, 'layer_idx', 0)": "rewires layer_idx with setattr",
}

ALLOWED = [
    "import torch\naten = torch.ops.aten\nOPS = {aten._to_copy.default, torch.ops.aten._unique2.default}",
    "import sys\nframe = sys._getframe(1)",
    "import torch\nprint(torch.__version__, torch.__file__, type(torch).__name__)",
    "class A:\n    def __init__(self):\n        self._views = {}\n    def f(self, other):\n        return other._views",
    "def f(self):\n    self.forward = None\n    return super().__init__()",
]


def test_the_scan_catches_each_kind_of_internal():
    """The scan can fail: each planted use is reported with its line, and public code is not."""
    for source, expected in PLANTED.items():
        hits = find_internals(source, "planted.py", set())
        assert any(expected in hit for hit in hits), f"{expected!r} not found in {hits} for:\n{source}"
        assert all(hit.startswith("planted.py:") for hit in hits)
    for source in ALLOWED:
        assert not find_internals(source, "allowed.py", own_private_names([source])), source
