"""Where in the modeling code an op or a failure came from: the innermost frame outside torch and us."""

from __future__ import annotations

import os
import sys

import torch

_INTERNAL_DIRS = tuple(
    os.path.dirname(os.path.abspath(path)).replace("\\", "/") + "/"
    for path in (torch.__file__, os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + "/__init__.py")
)


# filename -> is_internal: hazard detection asks for every frame of every op of two decode steps
_KNOWN: dict[str, bool] = {}


def is_internal(filename: str) -> bool:
    """torch's own files and this package's; not a user's, not transformers' (even under a folder named torch)."""
    known = _KNOWN.get(filename)
    if known is None:
        known = os.path.abspath(filename).replace("\\", "/").startswith(_INTERNAL_DIRS)
        if os.path.isabs(filename):  # a relative name depends on the working directory: not kept
            _KNOWN[filename] = known
    return known


def short(path: str) -> str:
    """transformers/models/llama/modeling_llama.py rather than the whole site-packages path."""
    path = path.replace("\\", "/")
    marker = "/site-packages/"
    return path.split(marker, 1)[1] if marker in path else path


def caller_location() -> str:
    """file:line of the innermost frame outside torch and this package: where the model called the op."""
    frame = sys._getframe(1)
    while frame is not None:
        if not is_internal(frame.f_code.co_filename):
            return f"{short(frame.f_code.co_filename)}:{frame.f_lineno}"
        frame = frame.f_back
    return "unknown location"


def traceback_location(err: BaseException) -> str:
    """file:line of the innermost model frame in an exception's traceback ("" when there is none)."""
    location = ""
    tb = err.__traceback__
    while tb is not None:
        if not is_internal(tb.tb_frame.f_code.co_filename):
            location = f"{short(tb.tb_frame.f_code.co_filename)}:{tb.tb_lineno}"
        tb = tb.tb_next
    return location
