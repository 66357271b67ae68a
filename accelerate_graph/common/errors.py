"""Domain errors: each carries one actionable sentence and the exit code the CLI should use.

The CLI maps these to a single stderr line; library users catch `CugraphAccelError`.
"""

from __future__ import annotations

USAGE_EXIT = 2  # the user asked for something malformed
RUNTIME_EXIT = 1  # the request was fine but could not be carried out
DROP_FUSE = "Drop --fuse: the plain graph still removes the launch overhead."  # the hint of every --fuse refusal


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
        self.message = message
        self.hint = hint
        super().__init__(f"{message} {hint}".strip() if hint else message)


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
