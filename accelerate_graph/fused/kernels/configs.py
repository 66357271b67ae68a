"""Launch configs of the skinny matmuls: a table per (op, row bucket, output sizes, K), written by
benchmarks/kernel_sweep.py on a GPU into skinny_configs.json, and a heuristic for shapes it lacks."""

from __future__ import annotations

import contextlib
import dataclasses
import json
from pathlib import Path

TABLE_PATH = Path(__file__).with_name("skinny_configs.json")
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
    # one row without dot: the next K block's loads issued before this one's sums (skinny_kernels'
    # _accumulate_one_row); nothing anywhere else
    lookahead: bool = False

    def block_m(self, m) -> int:
        """Rows per program: the next power of two of the rows (at most 32), at least 16 for tl.dot. A
        symbolic row count (a dynamic batch under torch.compile) gets 32, so no guard is put on it."""
        if not isinstance(m, int):
            return 32
        block = min(32, 1 << max(0, m - 1).bit_length())
        return max(16, block) if self.dot else block


def m_bucket(m) -> int:
    if not isinstance(m, int):
        return M_BUCKETS[-1]
    return next((b for b in M_BUCKETS if b >= m), M_BUCKETS[-1])


def table_key(op: str, bucket: int, ns: tuple[int, ...], k: int) -> str:
    return f"{op}|m{bucket}|n{'+'.join(str(n) for n in ns)}|k{k}"


def read_table(path: Path) -> dict[str, SkinnyConfig]:
    if not path.exists():
        return {}
    entries = json.loads(path.read_text(encoding="utf-8")).get("entries", {})
    return {key: SkinnyConfig(**fields) for key, fields in entries.items()}


# Each table read once. A plain dict, not functools.cache: dynamo traces the lookup inside a compiled layer
# without a warning, and the shipped table is read here, at import, not under tracing (a file stat breaks it).
_TABLES: dict[Path, dict[str, SkinnyConfig]] = {TABLE_PATH: read_table(TABLE_PATH)}


def _table(path: Path) -> dict[str, SkinnyConfig]:
    if path not in _TABLES:
        _TABLES[path] = read_table(path)
    return _TABLES[path]


@contextlib.contextmanager
def entries_replaced(entries: dict[str, SkinnyConfig]):
    """The shipped table read with `entries` in it, for the duration: benchmarks/whole_step_sweep.py tries
    configs in a captured step (the opaque op under PDL reads its config when it runs, so a capture after
    this takes them; a compiled triton_op kept the configs it was traced with)."""
    table = _table(TABLE_PATH)
    saved = dict(table)
    table.update(entries)
    try:
        yield
    finally:
        table.clear()
        table.update(saved)


def in_table(op: str, m, ns: tuple[int, ...], k: int) -> bool:
    """Whether the table has a config swept for this shape (else config_for falls back to the heuristic)."""
    return table_key(op, m_bucket(m), ns, k) in _table(TABLE_PATH)


def config_for(op: str, m, ns: tuple[int, ...], k: int, sms: int = DEFAULT_SMS) -> SkinnyConfig:
    """The table's config for this shape, else the heuristic's."""
    found = _table(TABLE_PATH).get(table_key(op, m_bucket(m), ns, k))
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


def write_table(
    entries: dict[str, SkinnyConfig], path: Path, device: str, written_by: str = "benchmarks/kernel_sweep.py"
) -> None:
    body = {
        "device": device,
        "written_by": written_by,
        "entries": {key: dataclasses.asdict(cfg) for key, cfg in sorted(entries.items())},
    }
    path.write_text(json.dumps(body, indent=1) + "\n", encoding="utf-8")
