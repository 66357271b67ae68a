"""Domain errors: each carries one actionable sentence and the exit code the CLI should use.

The CLI maps these to a single stderr line; library users catch `CugraphAccelError`.

Options in messages: an error names the option that fixes it by its Python keyword (the field of
`pipeline.CaptureRequest`, or of `accelerate()`), never by a CLI flag, as a placeholder in braces:
`{max_cache_len}`, or with a value, `{max_cache_len=512}`, `{mode='eager'}`, `{fuse=False}` (a Python
literal); an engine setting is `{settings.NAME=value}`. Inside an f-string build either with
`option("max_cache_len", length)`. `str(err)` writes the keyword
(`max_cache_len=512`); the CLI writes the flag (`--max-cache-len 512`, see `cli/errors.py`) through
`err.render(...)`. `message` and `hint` keep the placeholders, so an error re-raised with them stays renderable.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable

USAGE_EXIT = 2  # the user asked for something malformed
RUNTIME_EXIT = 1  # the request was fine but could not be carried out

# {name} or {name=value}: a name starts with a letter, so JSON examples and set reprs are left alone
OPTION_PLACEHOLDER = re.compile(r"\{([a-z][a-z0-9_]*(?:\.[a-z][a-z0-9_]*)?)(?:=([^{}]+))?\}")
SETTING = "settings."  # an engine setting (settings.py) rather than an option: `{settings.pdl=False}`
_NO_VALUE = object()

# One way to write an option: (its name, its value as a Python literal's text or None) -> text.
OptionWriter = Callable[[str, "str | None"], str]


def option(name: str, value: object = _NO_VALUE) -> str:
    """The placeholder for option `name` (with `value`, as a Python literal) in an error's message or hint."""
    return f"{{{name}}}" if value is _NO_VALUE else f"{{{name}={value!r}}}"


def keyword(name: str, value: str | None) -> str:
    """An option as the Python API spells it: `max_cache_len`, `max_cache_len=512`; a setting as the
    `settings=` value that sets it: `settings.replace(pdl=False)`."""
    if name.startswith(SETTING):
        setting = name.removeprefix(SETTING)
        return f"the {setting} setting" if value is None else f"settings.replace({setting}={value})"
    return name if value is None else f"{name}={value}"


def option_value(value: str) -> object:
    """A placeholder's value text as the Python value it spells (the text itself when it is no literal)."""
    try:
        return ast.literal_eval(value)
    except (ValueError, SyntaxError):
        return value


def render_options(text: str, write: OptionWriter = keyword) -> str:
    """`text` with each option placeholder written by `write` (default: as the Python keyword)."""
    return OPTION_PLACEHOLDER.sub(lambda found: write(found.group(1), found.group(2)), text)


# the hint of every fused-mode refusal
DROP_FUSE = f"Capture without fusing ({option('fuse', False)}): the plain graph still removes the launch overhead."


def first_line(err: BaseException, limit: int | None = None) -> str:
    """The first line of an exception's message (at most `limit` characters), or its type's name when
    the message is empty: what a one-line error quotes from a failure it wraps."""
    text = str(err).strip()
    line = text.splitlines()[0] if text else type(err).__name__
    return line[:limit] if limit is not None else line


def is_out_of_memory(err: BaseException) -> bool:
    """torch raises OutOfMemoryError outside a capture, a plain CUDA error inside one, and a
    RuntimeError "can't allocate memory" when the host runs out."""
    import torch  # here, not at the top: the CLI imports this module and must start fast

    text = str(err).lower()
    return isinstance(err, torch.OutOfMemoryError) or "out of memory" in text or "can't allocate memory" in text


class CugraphAccelError(Exception):
    """Base class: `str(err)` is the whole message a user sees."""

    exit_code = RUNTIME_EXIT

    def __init__(self, message: str, hint: str | None = None):
        self.message = message  # option placeholders kept (see the module's docstring)
        self.hint = hint
        super().__init__(f"{message} {hint}".strip() if hint else message)

    def render(self, write: OptionWriter = keyword) -> str:
        """The whole message, each option written by `write`; `str(err)` writes Python keywords."""
        return render_options(self.args[0] if self.args else "", write)

    def __str__(self) -> str:
        return self.render()


class BadOptionError(CugraphAccelError):
    """A malformed command-line value (buckets, dtype, device, ...)."""

    exit_code = USAGE_EXIT


class ModelNotFoundError(CugraphAccelError):
    """MODEL is neither a recipe, a local folder nor a reachable hub id."""


class UnsupportedModelError(CugraphAccelError):
    """The model loads but cannot run a static-cache decode step (not a causal LM, ...)."""


class RecipeError(CugraphAccelError):
    """A recipe file is malformed (unknown key, wrong type)."""

    exit_code = USAGE_EXIT


class PlanError(CugraphAccelError):
    """The plan file is missing, corrupt or does not match this environment."""


class DeviceError(CugraphAccelError):
    """The requested device is not available."""


class CaptureError(CugraphAccelError):
    """An operation in the decode step cannot be recorded into a graph."""


class ResourceError(CugraphAccelError):
    """Not enough device memory for the cache or the graphs asked for."""


class ReplaySafetyError(CugraphAccelError):
    """A static buffer a graph reads moved or was replaced after capture."""


class VerificationError(CugraphAccelError):
    """Replay disagreed with eager execution."""


class DistributedError(CugraphAccelError):
    """A tensor-parallel run could not start, lost a rank, or could not end cleanly."""


class CpuTimingRefused(CugraphAccelError):
    """Timings on the CPU say nothing about CUDA graphs; refused unless asked for."""

    exit_code = USAGE_EXIT


class WriteError(CugraphAccelError):
    """An output file could not be written (permissions, a full disk, a special file system)."""


class ModelFileError(CugraphAccelError):
    """A file of the model is truncated or corrupt."""


class NonFiniteError(CugraphAccelError):
    """Eager execution or the float32 reference produced NaN or Inf: bad weights, or a dtype that overflows."""


class EngineWarning(UserWarning):
    """A notice for the user (a missing tuning table, an eager fallback): the CLI prints it as one line."""
