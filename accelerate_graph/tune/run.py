"""`tune`'s work, front to back: refuse off a GPU, read MODEL's shapes, sweep each row bucket, merge what won
into the user's table for this GPU: the skinny kernels' (`--weights model`) or the FP8 kernel's (`fp8`,
`fp8-block`: quant/fp8_skinny.py's table, fp8-<GPU>.json)."""

from __future__ import annotations

import dataclasses
import itertools
import time
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path

import torch

from accelerate_graph.common.errors import BadOptionError, CpuTimingRefused, DeviceError, UnsupportedModelError, option
from accelerate_graph.fused.kernels import configs
from accelerate_graph.tune import grids
from accelerate_graph.tune.model_shapes import LayerShapes, layer_shapes
from accelerate_graph.tune.sweep import BucketResult, tune_bucket, tune_fp8_bucket
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
    weights: str = "model"
    compile_workers: int = 0  # processes that compiled the FP8 sweep's configs ahead of it

    def to_dict(self) -> dict:
        return {
            "device": self.device,
            "model": self.shapes.model,
            "weights": self.weights,
            "table": str(self.path),
            "added": self.added,
            "changed": self.changed,
            "compile_workers": self.compile_workers,
            "buckets": [
                {
                    "rows": r.rows,
                    "before_us_per_layer": round(r.before_us, 3),
                    "chosen_us_per_layer": round(r.chosen_us, 3),
                    "inductor_us_per_layer": None if r.inductor_us is None else round(r.inductor_us, 3),
                    "written": r.written,
                    "seconds": round(r.seconds, 1),
                    "chosen": {r.keys[op]: dataclasses.asdict(cfg) for op, cfg in r.chosen.items()},
                    "wrong": r.wrong,
                    "unchecked": sorted(r.unchecked),
                    "cut_short": {op: {"tried": tried, "of": size} for op, (tried, size) in r.cut_short.items()},
                    "unreached": sorted(r.unreached),
                    "trials": [
                        {
                            "op": op,
                            "config": grids.describe(cfg),
                            "us_per_layer": None if us is None else round(us, 3),
                            "seconds": round(seconds, 3) if seconds is not None else None,
                        }
                        for (op, cfg, us), seconds in itertools.zip_longest(r.trials, r.trial_seconds)
                    ],
                }
                for r in self.results
            ],
        }


def check_buckets(buckets: Sequence[int]) -> tuple[int, ...]:
    """The row buckets to sweep: some of those the tables keep (configs.M_BUCKETS, FP8's too: its kernel runs every
    decode batch), each once, in order."""
    kept = configs.M_BUCKETS
    if not buckets or any(b not in kept for b in buckets):
        raise BadOptionError(
            f"{option('buckets', tuple(buckets))}: the tuning tables keep configs for {','.join(map(str, kept))} "
            "rows only.",
            f"Give some of {','.join(map(str, kept))}.",
        )
    return tuple(sorted(set(buckets)))


def fp8_block_for(shapes: LayerShapes, weights: str) -> int | None:
    """The scale block the FP8 chain runs with (None: per channel); refused in one line where MODEL's layers
    are not what `weights` asks to tune: an FP8 checkpoint's layers are FP8 with its block scales."""
    from accelerate_graph.quant.fp8_format import SCHEME_BLOCK

    if shapes.fp8_block is None:
        return SCHEME_BLOCK.get(weights)
    if weights != "fp8-block":
        raise UnsupportedModelError(
            f"{shapes.model} is an FP8 checkpoint ({shapes.fp8_block}x{shapes.fp8_block} block scales): its "
            f"layers run the FP8 kernel, not what {option('weights', weights)} tunes.",
            f"Pass {option('weights', 'fp8-block')}.",
        )
    return shapes.fp8_block


def gpu_at_hand() -> torch.device:
    """The current CUDA device, where the skinny kernels run; refused in one line elsewhere."""
    from accelerate_graph.fused.kernels import skinny_matmul
    from accelerate_graph.quant import fp8_skinny

    if not torch.cuda.is_available():
        raise CpuTimingRefused(
            "tune times the skinny kernels on a CUDA GPU, and this machine has none.",
            "Run it on the GPU the table is for.",
        )
    if skinny_matmul.skinny_kernels is None or fp8_skinny.fp8_kernels is None:
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
    buckets: Sequence[int] | None = None,
    budget_s: float = DEFAULT_BUDGET_S,
    out: Path | None = None,
    force: bool = False,
    revision: str | None = None,
    say: Callable[[str], None] = lambda text: None,
    weights: str = "model",
    compile_workers: int | None = None,
) -> TuneReport:
    """Sweeps MODEL's shapes at each of `buckets` rows (default: every bucket of the weights' table) on the GPU
    at hand, `budget_s` seconds of trying configs shared among them, and merges what won into the table at
    `out` (default the user's table for this GPU: the skinny kernels' for `weights` "model", configs that beat
    inductor's kernels at one row; the FP8 kernel's for "fp8" / "fp8-block", configs that agree with the
    reference; `compile_workers` processes, default compile_ahead.default_workers(), compile the FP8 configs
    ahead of the sweep). Later lookups in this process read it."""
    from accelerate_graph.fused.kernels import skinny_matmul
    from accelerate_graph.quant import fp8_skinny
    from accelerate_graph.quant.quantize import check_weights
    from accelerate_graph.tune.chain import Chain
    from accelerate_graph.tune.compile_ahead import compiling_ahead, default_workers
    from accelerate_graph.tune.fp8_chain import Fp8Chain

    fp8 = check_weights(weights) != "model"
    buckets = check_buckets(configs.M_BUCKETS if buckets is None else buckets)
    if budget_s < 0:
        raise BadOptionError(f"{option('budget_s', budget_s)} is negative.", "Give 0 or more seconds.")
    if compile_workers is not None and compile_workers < 0:
        raise BadOptionError(f"{option('compile_workers', compile_workers)} is negative.", "Give 0 or more.")
    device = gpu_at_hand()
    name = torch.cuda.get_device_name(device)
    path = Path(out) if out is not None else (fp8_skinny.user_table_path if fp8 else configs.user_table_path)(name)
    check_target(path, name, force)
    shapes = layer_shapes(model, revision)
    block = fp8_block_for(shapes, weights)
    sms = configs.multiprocessors(device)
    if not fp8:
        skinny_matmul.prepare_split_finish(device)  # split-K's counters, made before any capture
    workers = (default_workers() if compile_workers is None else compile_workers) if fp8 else 0
    kind = f", weights {weights}" if fp8 else ""
    ahead = f", {workers} processes compiling ahead" if workers else ""
    say(f"{name}: {model}{kind}, row buckets {','.join(map(str, buckets))}, {budget_s:g} s of trials{ahead}")
    results = []
    start = time.monotonic()
    with warnings.catch_warnings(), compiling_ahead(shapes, block, device, workers) as compiler:
        warnings.filterwarnings("ignore", message="no tuning table")  # what this run is making
        for index, rows in enumerate(buckets):
            began = time.monotonic()
            share = (budget_s - (began - start)) / (len(buckets) - index)
            chain = Fp8Chain(shapes, block, rows, device) if fp8 else Chain(shapes, rows, device)
            say(f"{rows} row(s): {chain.layers_count} layers in the chain")
            deadline = time.monotonic() + max(0.0, share)
            if fp8:
                result = tune_fp8_bucket(chain, sms, deadline, _announcer(rows, say), compiler)
            else:
                result = tune_bucket(chain, sms, deadline, _announcer(rows, say))
            result.seconds = time.monotonic() - began
            say(f"{rows} row(s): {len(result.trials)} configs tried in {result.seconds:.0f} s")
            results.append(result)
            del chain
            torch.cuda.empty_cache()
    report = TuneReport(name, shapes, results, path, weights=weights, compile_workers=workers)
    chosen = {key: cfg for result in results for key, cfg in result.entries().items()}
    if chosen:
        report.added, report.changed = merge_into(path, chosen, name, swept_with(), force)
        configs.forget_tables()
        fp8_skinny.forget_tables()
    return report
