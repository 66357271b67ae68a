"""Launch configs of the skinny matmuls: a tuning table per GPU, keyed by (op, row bucket, output sizes, K), and
a heuristic for shapes a table lacks.

Configs are the GPU's: the tables of the current CUDA device's name serve, the user's (written by `cugraph-accel
tune MODEL` under $XDG_CACHE_HOME/cugraph-accel/tuning/) entries over those of the one shipped in tables/. A GPU
with neither has no table: `in_table` is False everywhere, so the fused step runs inductor's kernels and cuBLAS,
and one warning says how to make a table. On the CPU (the Triton interpreter) no device has a name: `use_device`
names one, so that its tables serve."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import warnings
from collections.abc import Iterator, Mapping
from pathlib import Path

import torch

from accelerate_graph.common.errors import CugraphAccelError, EngineWarning

SHIPPED_DIR = Path(__file__).with_name("tables")
TABLE_PREFIX = "skinny-"
M_BUCKETS = (1, 8, 16, 32)  # the sweep's row counts; a call takes the smallest bucket >= its rows
OPS = ("proj", "residual", "gate_up")
DEFAULT_SMS = 132  # H200's multiprocessors: what CPU (interpreter) calls assume


@dataclasses.dataclass(frozen=True)
class SkinnyConfig:
    block_n: int
    block_k: int
    num_warps: int = 4
    num_stages: int = 3
    split_k: int = 1  # > 1: K cut in that many slices, float32 partials, a finishing pass
    dot: bool = False  # tensor cores (rows padded to 16) rather than float32 multiply-and-sum
    swap: bool = False  # with dot: W @ x^T, the weights on the MMA's long side (cuBLAS's skinny tiles)
    # with dot, FP8 weights and bf16 x: x split exactly into two e4m3 terms, so the tensor cores multiply the
    # weights' codes as loaded (quant/fp8_kernels._x_as_e4m3_pair); nothing anywhere else
    e4m3_dot: bool = False
    # one row without dot: the next K block's loads issued before this one's sums (skinny_kernels'
    # _accumulate_one_row); nothing anywhere else
    lookahead: bool = False
    # with dot, FP8 gate/up and weights converted to x's dtype: gate's and up's tiles in one walk of K, each x
    # tile loaded once for both (e4m3_dot walks so always); nothing anywhere else
    pair: bool = False
    # a launch of the FP8 kernel with the RMSNorm folded in: the norm as its own kernel first, x normalised once
    # rather than by every program (at 32 rows a K tile of x holds half as many values as a 64-row weight
    # tile, and the norm's arithmetic nearly doubled the loop's instructions, sm_90 SASS); nothing anywhere else
    norm_apart: bool = False
    # one row without dot on FP8 weights: the K walk pipelined num_stages deep through shared memory (cp.async),
    # which Triton gives a loop without tl.dot only when the loop asks for it; nothing anywhere else
    staged: bool = False
    # with e4m3_dot: x's two e4m3 terms made by a kernel of their own first (the norm with them where folded)
    # and loaded as copied, where each program split every x tile in its loop; nothing anywhere else
    x_apart: bool = False

    def block_m(self, m) -> int:
        """Rows per program: the next power of two of the rows (at most 32), at least 16 for tl.dot. A
        symbolic row count (a dynamic batch under torch.compile) gets 32, so no guard is put on it."""
        if not isinstance(m, int):
            return 32
        block = min(32, 1 << max(0, m - 1).bit_length())
        return max(16, block) if self.dot else block


def multiprocessors(device: torch.device) -> int:
    """The multiprocessors of `device`, a CUDA GPU; DEFAULT_SMS elsewhere (the interpreter)."""
    if device.type != "cuda":
        return DEFAULT_SMS
    return torch.cuda.get_device_properties(device).multi_processor_count


def m_bucket(m) -> int:
    if not isinstance(m, int):
        return M_BUCKETS[-1]
    return next((b for b in M_BUCKETS if b >= m), M_BUCKETS[-1])


def table_key(op: str, bucket: int, ns: tuple[int, ...], k: int) -> str:
    return f"{op}|m{bucket}|n{'+'.join(str(n) for n in ns)}|k{k}"


class TableError(CugraphAccelError):
    """A tuning table that cannot be read."""


def table_file_name(device_name: str) -> str:
    """`skinny-<device>.json`, the device name as torch reports it with spaces (and anything unsafe in a file
    name) as `_`: `skinny-NVIDIA_H200.json`."""
    return TABLE_PREFIX + re.sub(r"[^A-Za-z0-9._-]", "_", device_name.strip()) + ".json"


def user_tables_dir(environ: Mapping[str, str] = os.environ) -> Path:
    """Where `cugraph-accel tune` writes: $XDG_CACHE_HOME/cugraph-accel/tuning (default ~/.cache)."""
    cache = environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache).expanduser() / "cugraph-accel" / "tuning"


def user_table_path(device_name: str, environ: Mapping[str, str] = os.environ) -> Path:
    return user_tables_dir(environ) / table_file_name(device_name)


def shipped_table_path(device_name: str) -> Path:
    return SHIPPED_DIR / table_file_name(device_name)


def read_table(path: Path) -> dict[str, SkinnyConfig]:
    """The entries of the table at `path` ({} when there is none)."""
    if not path.exists():
        return {}
    try:
        entries = json.loads(path.read_text(encoding="utf-8")).get("entries", {})
        return {key: SkinnyConfig(**fields) for key, fields in entries.items()}
    except (OSError, ValueError, TypeError, AttributeError) as err:
        raise TableError(
            f"the tuning table {path} cannot be read ({str(err).splitlines()[0][:120]}).",
            "Delete it, or run `cugraph-accel tune MODEL --force` to write a new one.",
        ) from err


@dataclasses.dataclass(frozen=True)
class TableInUse:
    """Which table serves a device: origin "user" (its entries over the shipped table's, `shipped`, if there is
    one), "shipped" or "none" (then `path` is None)."""

    device: str
    origin: str
    path: Path | None = None
    shipped: Path | None = None

    def as_dict(self) -> dict:
        paths = {"path": self.path, "shipped": self.shipped}
        return {"device": self.device, "origin": self.origin} | {k: str(v) if v else None for k, v in paths.items()}


NO_TABLE_WARNING = (
    "no tuning table for {device}: the fused step uses inductor's kernels; run `cugraph-accel tune MODEL` to make one"
)

# Plain dicts and lists, filled outside tracing (a file stat under dynamo breaks a compiled layer): use_device
# reads the tables on entry, _cuda_device_name as a constant dynamo runs while tracing.
_NAMES: dict[int, str] = {}  # CUDA device index -> its name
_TABLES: dict[str, tuple[dict[str, SkinnyConfig], TableInUse]] = {}  # device name -> entries, which table
_NAMED: list[str] = []  # use_device's names, innermost last
_WARNED: set[str] = set()  # devices told they have no table: once a process
_NO_ENTRIES: dict[str, SkinnyConfig] = {}


def read_tables(device_name: str, user: Path, shipped: Path) -> tuple[dict[str, SkinnyConfig], TableInUse]:
    """`device_name`'s entries, the user's table's over the shipped one's, and which table serves."""
    entries = {**read_table(shipped), **read_table(user)}
    if user.exists():
        found = TableInUse(device_name, "user", user, shipped if shipped.exists() else None)
    elif shipped.exists():
        found = TableInUse(device_name, "shipped", shipped)
    else:
        found = TableInUse(device_name, "none")
    return entries, found


def _load(device_name: str) -> None:
    if device_name not in _TABLES:
        _TABLES[device_name] = read_tables(device_name, user_table_path(device_name), shipped_table_path(device_name))


def _notice(device_name: str) -> None:
    """`device_name`'s tables read, and a device without one told so (once a process)."""
    _load(device_name)
    if _TABLES[device_name][1].origin == "none" and device_name not in _WARNED:
        _WARNED.add(device_name)
        warnings.warn(NO_TABLE_WARNING.format(device=device_name), EngineWarning, stacklevel=5)


@torch.compiler.assume_constant_result
def _cuda_device_name() -> str:
    """The current CUDA device's name ("" without CUDA), its tables read: a constant to dynamo, which runs it
    while tracing (the device of a process does not change under a compiled layer)."""
    if not torch.cuda.is_available():
        return ""
    index = torch.cuda.current_device()
    if index not in _NAMES:
        _NAMES[index] = torch.cuda.get_device_name(index)
    _notice(_NAMES[index])
    return _NAMES[index]


def _serving_name() -> str:
    """The device whose tables serve, its tables read: use_device's name, else the current CUDA device's ("" on
    the CPU)."""
    if _NAMED:  # use_device read the tables on entry; dynamo guards on the name
        name = _NAMED[-1]
        if name not in _TABLES:  # forget_tables inside use_device
            _notice(name)
        return name
    return _cuda_device_name()


def _entries() -> dict[str, SkinnyConfig]:
    name = _serving_name()
    return _TABLES[name][0] if name else _NO_ENTRIES


def table_in_use(device_name: str | None = None) -> TableInUse:
    """Which table serves `device_name` (default: the current device, or use_device's name): for the bench
    header and --json results."""
    name = device_name if device_name is not None else _serving_name()
    if not name:
        return TableInUse("", "none")
    _load(name)
    return _TABLES[name][1]


@contextlib.contextmanager
def use_device(device_name: str) -> Iterator[None]:
    """The tables of `device_name` serve for the duration, whatever device runs (the CPU: the tests)."""
    _notice(device_name)
    _NAMED.append(device_name)
    try:
        yield
    finally:
        _NAMED.pop()


def forget_tables() -> None:
    """Read the tables again at the next lookup (after `tune` wrote one, or the cache folder changed). A layer
    compiled before keeps the decisions it was traced with."""
    _TABLES.clear()


def table_holds(device_name: str, key: str) -> bool:
    """Whether `device_name`'s tables (the user's over the shipped one) have a config for `key` (table_key's)."""
    _load(device_name)
    return key in _TABLES[device_name][0]


def in_table(op: str, m, ns: tuple[int, ...], k: int) -> bool:
    """Whether the table has a config swept for this shape (else config_for falls back to the heuristic)."""
    return table_key(op, m_bucket(m), ns, k) in _entries()


def config_for(op: str, m, ns: tuple[int, ...], k: int, sms: int = DEFAULT_SMS) -> SkinnyConfig:
    """The table's config for this shape, else the heuristic's."""
    found = _entries().get(table_key(op, m_bucket(m), ns, k))
    return found if found is not None else heuristic(op, m, ns, k, sms)


def heuristic(op: str, m, ns: tuple[int, ...], k: int, sms: int = DEFAULT_SMS) -> SkinnyConfig:
    """Tensor cores from 4 rows up (fp32 FMA at 8+ rows nears the memory time of an 8B layer), the
    weights on the MMA's long side (swap); blocks of N small enough that every multiprocessor gets a
    program; no split-K (its second pass costs a launch)."""
    dot = not isinstance(m, int) or m > 2
    block_k = 128 if dot else (256 if m == 1 else 128)
    rows = SkinnyConfig(16, block_k, dot=dot).block_m(m)
    m_blocks = -(-m // rows) if isinstance(m, int) else 1
    block_n = 16
    for candidate in (64, 32):
        if not dot and rows * candidate * block_k > 8192:  # the fp32 product lives in registers
            continue
        if sum(-(-n // candidate) for n in ns) * m_blocks >= sms:
            block_n = candidate
            break
    return SkinnyConfig(block_n, block_k, num_warps=4, num_stages=4 if dot else 2, dot=dot, swap=dot)
