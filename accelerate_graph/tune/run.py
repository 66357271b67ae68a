"""`tune`'s work, front to back: refuse off a GPU, read MODEL's shapes, sweep each row bucket, merge what won
into the user's table for this GPU."""

from __future__ import annotations

import dataclasses
import time
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path

import torch

from accelerate_graph.common.errors import BadOptionError, CpuTimingRefused, DeviceError, option
from accelerate_graph.fused.kernels import configs
from accelerate_graph.tune.model_shapes import LayerShapes, layer_shapes
from accelerate_graph.tune.sweep import BucketResult, tune_bucket
from accelerate_graph.tune.table import check_target, merge_into

DEFAULT_BUDGET_S = 480.0


@dataclasses.dataclass
class TuneReport:
    device: str
    shapes: LayerShapes
    results: list[BucketResult]
    path: Path
    added: int = 0
    changed: int = 0

    def to_dict(self) -> dict:
        return {
            "device": self.device,
            "model": self.shapes.model,
            "table": str(self.path),
            "added": self.added,
            "changed": self.changed,
            "buckets": [
                {
                    "rows": r.rows,
                    "before_us_per_layer": round(r.before_us, 3),
                    "chosen_us_per_layer": round(r.chosen_us, 3),
                    "inductor_us_per_layer": round(r.inductor_us, 3),
                    "written": r.written,
                    "chosen": {r.keys[op]: dataclasses.asdict(cfg) for op, cfg in r.chosen.items()},
                }
                for r in self.results
            ],
        }


def check_buckets(buckets: Sequence[int]) -> tuple[int, ...]:
    """The row buckets to sweep: some of the table's (configs.M_BUCKETS), each once, in order."""
    wrong = [b for b in buckets if b not in configs.M_BUCKETS]
    if wrong or not buckets:
        raise BadOptionError(
            f"{option('buckets', tuple(buckets))}: the tuning table keeps configs for "
            f"{','.join(map(str, configs.M_BUCKETS))} rows only.",
            f"Give some of {','.join(map(str, configs.M_BUCKETS))}.",
        )
    return tuple(sorted(set(buckets)))


def gpu_at_hand() -> torch.device:
    """The current CUDA device, where the skinny kernels run; refused in one line elsewhere."""
    from accelerate_graph.fused.kernels import skinny_matmul

    if not torch.cuda.is_available():
        raise CpuTimingRefused(
            "tune times the skinny kernels on a CUDA GPU, and this machine has none.",
            "Run it on the GPU the table is for.",
        )
    if skinny_matmul.skinny_kernels is None:
        raise DeviceError("tune needs Triton for the skinny kernels, and it does not import here.", "Install triton.")
    return torch.device("cuda", torch.cuda.current_device())


def _announcer(rows: int, say: Callable[[str], None]) -> Callable:
    """A sweep's trial callback that says when it starts on an op's grid (a long sweep is not silent)."""
    last: list[str] = []

    def heard(op: str, cfg, took) -> None:
        if last != [op]:
            last[:] = [op]
            say(f"{rows} row(s): trying {op}'s configs")

    return heard


def swept_with() -> dict[str, str]:
    import triton

    return {"torch": str(torch.__version__), "triton": str(triton.__version__)}


def run_tune(
    model: str,
    buckets: Sequence[int] = configs.M_BUCKETS,
    budget_s: float = DEFAULT_BUDGET_S,
    out: Path | None = None,
    force: bool = False,
    revision: str | None = None,
    say: Callable[[str], None] = lambda text: None,
) -> TuneReport:
    """Sweeps MODEL's shapes at each of `buckets` rows on the GPU at hand, `budget_s` seconds of trying configs
    shared among them, and merges the configs that beat inductor's kernels into the table at `out` (default
    the user's table for this GPU). Later lookups in this process read it."""
    from accelerate_graph.fused.kernels import skinny_matmul
    from accelerate_graph.tune.chain import Chain

    buckets = check_buckets(buckets)
    if budget_s < 0:
        raise BadOptionError(f"{option('budget_s', budget_s)} is negative.", "Give 0 or more seconds.")
    device = gpu_at_hand()
    name = torch.cuda.get_device_name(device)
    path = Path(out) if out is not None else configs.user_table_path(name)
    check_target(path, name, force)
    shapes = layer_shapes(model, revision)
    sms = torch.cuda.get_device_properties(device).multi_processor_count
    skinny_matmul.prepare_split_finish(device)  # split-K's counters, made before any capture
    say(f"{name}: {model}, row buckets {','.join(map(str, buckets))}, {budget_s:g} s of trials")
    results = []
    start = time.monotonic()
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="no tuning table")  # what this run is making
        for index, rows in enumerate(buckets):
            share = (budget_s - (time.monotonic() - start)) / (len(buckets) - index)
            chain = Chain(shapes, rows, device)
            say(f"{rows} row(s): {chain.layers_count} layers in the chain")
            results.append(tune_bucket(chain, sms, time.monotonic() + max(0.0, share), _announcer(rows, say)))
            del chain
            torch.cuda.empty_cache()
    report = TuneReport(name, shapes, results, path)
    chosen = {key: cfg for result in results for key, cfg in result.entries().items()}
    if chosen:
        report.added, report.changed = merge_into(path, chosen, name, swept_with(), force)
        configs.forget_tables()
    return report
