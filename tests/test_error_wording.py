"""Library errors name options by keyword placeholders (common/errors.py), never by CLI flag: a `--flag` in the
text of a project error is wrong for library users, and the CLI writes the flags itself (cli/errors.py).

The check reads every module of accelerate_graph with `ast`: the arguments of each call of an error class of
common/errors.py (or of a class derived from one), with the strings they reach through a name assigned in the
same function or module, and the strings of a same-module function whose result is passed (a hint builder). A `--` followed by a letter is
allowed only inside backticks, where it is part of a quoted shell command.
"""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path

from accelerate_graph.common import errors

PACKAGE = Path(__file__).resolve().parent.parent / "accelerate_graph"
FLAG = re.compile(r"--[A-Za-z]")
QUOTED = re.compile(r"`[^`]*`")
BASE_ERRORS = frozenset(
    name
    for name, value in vars(errors).items()
    if inspect.isclass(value) and issubclass(value, errors.CugraphAccelError)
)


def _text(node: ast.AST) -> str | None:
    """A string constant's text, or an f-string's with each formatted value as `{}` (so backticks around a
    formatted value still quote it)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(part.value if isinstance(part, ast.Constant) else "{}" for part in node.values)
    return None


def _called_name(call: ast.Call) -> str | None:
    func = call.func
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return None


class _Module:
    """One module's functions and assignments, to follow a name or a call to the strings behind it."""

    def __init__(self, tree: ast.Module):
        self.tree = tree
        self.functions = {
            node.name: node for node in ast.walk(tree) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        }
        self.parents: dict[ast.AST, ast.AST] = {}
        for parent in ast.walk(tree):
            for child in ast.iter_child_nodes(parent):
                self.parents[child] = parent

    def scopes(self, node: ast.AST) -> list[ast.AST]:
        """The functions around `node`, innermost first, then the module."""
        found = []
        while node in self.parents:
            node = self.parents[node]
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                found.append(node)
        return [*found, self.tree]

    def assigned(self, name: str, scope: ast.AST) -> list[ast.AST]:
        """The values assigned to `name` in `scope` (not in functions nested in it)."""
        values = []
        for node in _walk_scope(scope):
            if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
                values.append(node.value)
            elif isinstance(node, (ast.AnnAssign, ast.AugAssign)) and node.value is not None:
                if isinstance(node.target, ast.Name) and node.target.id == name:
                    values.append(node.value)
        return values


def _walk_scope(scope: ast.AST):
    """Every node of `scope` except what nested functions and classes hold."""
    stack = list(ast.iter_child_nodes(scope))
    while stack:
        node = stack.pop()
        yield node
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            stack.extend(ast.iter_child_nodes(node))


def _strings(node: ast.AST, module: _Module, seen: set[int]) -> list[tuple[int, str]]:
    """(line, text) of every string an error's argument `node` is built from: string constants and f-strings,
    through operators, conditionals, calls' arguments, a name's assignments and a same-module builder's body."""
    if id(node) in seen:
        return []
    seen.add(id(node))
    text = _text(node)
    if text is not None:
        found = [(node.lineno, text)]
        if isinstance(node, ast.JoinedStr):  # a formatted value may be a named hint or a builder's result
            for part in node.values:
                if isinstance(part, ast.FormattedValue) and isinstance(part.value, (ast.Name, ast.Call)):
                    found += _strings(part.value, module, seen)
        return found
    if isinstance(node, ast.Name):
        for scope in module.scopes(node):
            values = module.assigned(node.id, scope)
            if values:
                return [item for value in values for item in _strings(value, module, seen)]
        return []
    if isinstance(node, ast.Call):
        found = []
        builder = module.functions.get(_called_name(node) or "")
        if builder is not None and id(builder) not in seen:
            seen.add(id(builder))
            body = builder.body
            if body and isinstance(body[0], ast.Expr) and _text(body[0].value) is not None:
                body = body[1:]  # the docstring is documentation, not message text
            for statement in body:
                found += _texts_in(statement)
        parts = [*node.args, *(keyword.value for keyword in node.keywords)]
        if isinstance(node.func, ast.Attribute):  # "; ".join(parts): the separator is text too
            parts.append(node.func.value)
        return found + [item for part in parts for item in _strings(part, module, seen)]
    if isinstance(node, (ast.BinOp, ast.BoolOp, ast.IfExp, ast.Tuple, ast.List, ast.Starred)):
        return [item for child in ast.iter_child_nodes(node) for item in _strings(child, module, seen)]
    return []


def _texts_in(statement: ast.AST) -> list[tuple[int, str]]:
    """Every string constant and f-string in a builder's statement, each f-string once."""
    found = []
    stack = [statement]
    while stack:
        node = stack.pop()
        text = _text(node)
        if text is not None:
            found.append((node.lineno, text))
        else:
            stack.extend(ast.iter_child_nodes(node))
    return found


def error_classes(trees: list[ast.Module]) -> frozenset[str]:
    """The error classes of common/errors.py and every class the modules derive from one (e.g. a table's error)."""
    names = set(BASE_ERRORS)
    classes = [node for tree in trees for node in ast.walk(tree) if isinstance(node, ast.ClassDef)]
    while True:
        more = {
            node.name
            for node in classes
            if node.name not in names
            and any(
                (base.id if isinstance(base, ast.Name) else getattr(base, "attr", None)) in names for base in node.bases
            )
        }
        if not more:
            return frozenset(names)
        names |= more


def flags_in_errors(source: str, filename: str, classes: frozenset[str] | None = None) -> list[str]:
    """`filename:line: text` for each string in a project error's arguments that names a CLI flag."""
    module = _Module(ast.parse(source, filename))
    classes = error_classes([module.tree]) if classes is None else classes
    problems = []
    for call in ast.walk(module.tree):
        if not isinstance(call, ast.Call) or _called_name(call) not in classes:
            continue
        seen: set[int] = set()
        for argument in [*call.args, *(keyword.value for keyword in call.keywords)]:
            for line, text in _strings(argument, module, seen):
                if FLAG.search(QUOTED.sub("", text)):
                    problems.append(f"{filename}:{line}: {text!r}")
    return sorted(set(problems))


def test_no_library_error_names_a_cli_flag():
    sources = {str(path.relative_to(PACKAGE.parent)): path.read_text() for path in sorted(PACKAGE.rglob("*.py"))}
    classes = error_classes([ast.parse(source) for source in sources.values()])
    assert "TableError" in classes  # a subclass defined outside common/errors.py is checked too
    problems = [problem for name, source in sources.items() for problem in flags_in_errors(source, name, classes)]
    assert not problems, (
        "errors name options as placeholders ({max_cache_len=512}, option(name, value)), not flags:\n"
        + "\n".join(problems)
    )


PLANTED = """
from accelerate_graph.common.errors import BadOptionError, PlanError, option

RETRY = "Re-run with --debug."  # flagged: a module's name passed as a hint


class TableError(PlanError):
    pass


def what_fits(size):
    return f"try --max-cache-len {size}"  # flagged: a builder's text


def read(path, size, window):
    if size < 0:
        raise BadOptionError(f"--window-len {window} is too short.")  # flagged
    if size == 0:
        hint = "Pass --force to replace it."  # flagged: a local name
        raise PlanError("exists.", hint)
    if size == 1:
        raise PlanError("failed.", RETRY)
    if size == 2:
        raise PlanError("too big.", what_fits(size))
    if size == 3:
        raise TableError("the table is corrupt.", "Delete it, or pass --force.")  # flagged: a derived class
    if size == 4:
        raise PlanError(f"bad {path}.", f"Run `cugraph-accel capture {path} --fuse` first, then {option('fuse')}.")
    raise BadOptionError(f"{option('window_len', window)} is too short.", "Lower -- only dashes -- 5.")
"""


def test_checker_finds_flags_in_messages_hints_names_builders_and_subclasses():
    flagged = {f"planted.py:{n}" for n, line in enumerate(PLANTED.splitlines(), 1) if "# flagged" in line}
    found = flags_in_errors(PLANTED, "planted.py")
    assert {problem.split(": ", 1)[0] for problem in found} == flagged
    assert len(found) == len(flagged) == 5


def test_checker_leaves_quoted_commands_placeholders_and_other_calls_alone():
    clean = PLANTED.split("def what_fits")[0].replace("--debug", "{settings.debug=True}") + (
        "def read(path):\n"
        '    print("--fuse is fine outside an error")\n'
        '    raise PlanError(f"no plan at {path}.", f"Run `cugraph-accel capture {path} --fuse` first.")\n'
        '    raise BadOptionError(f"{option(\'window_len\', 3)} is too short.", "Lower it -- 5 is the least.")\n'
    )
    assert flags_in_errors(clean, "clean.py") == []
