"""The zoo: every decoder-only causal-LM type, tiny and random, through the real decide/capture/verify path.

One entry: build the type's tiny model, open a static-cache decode session (does an eager static-cache
decode work at all?), let `decide_regions` choose full / piecewise / eager as `--mode auto` would,
capture every bucket and verify replay against eager over steps that cross every sliding window.
On CUDA a device-side assert poisons the whole process, so `run_zoo` can run each entry in a child.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, PreTrainedConfig

from accelerate_graph import settings as engine_settings
from accelerate_graph.capture_flow import decide_regions
from accelerate_graph.common.devices import resolve_device
from accelerate_graph.common.errors import UnsupportedModelError
from accelerate_graph.core.backends import backend_for
from accelerate_graph.core.capture import capture_decode_graphs
from accelerate_graph.core.decode_session import DecodeSession
from accelerate_graph.verify.against_eager import verify_graphs
from accelerate_graph.zoo.configs import quiet, tiny_config
from accelerate_graph.zoo.model_types import model_features, skipped_model_types

STATUSES = ("full", "piecewise", "eager", "no-static-cache", "load-failed", "verify-failed", "crashed", "skipped")
FAILED = ("verify-failed", "crashed")
# Stages in order; an entry that got past "static-cache" has a working eager static-cache decode.
STAGES = ("config", "load", "static-cache", "hazards", "capture", "verify", "done")
CACHE_LEN = 64
ENTRY_TIMEOUT_S = 120.0
STAGE_MARK = "zoo-stage:"  # a child reports its stage on stderr, so a crash still says how far it got


@dataclass
class ZooResult:
    model_type: str
    status: str
    stage: str = "config"
    mode: str = ""
    islands: int = 0
    hazards: list[str] = field(default_factory=list)  # "kind in ModuleClass", one per distinct pair
    fixes: list[str] = field(default_factory=list)
    features: list[str] = field(default_factory=list)  # moe, sliding-window, gqa, tied, partial-rotary, alibi
    verify_max_abs: float | None = None
    verify_passed: bool | None = None
    seconds: float = 0.0
    reason: str = ""

    @property
    def static_cache_works(self) -> bool:
        return STAGES.index(self.stage) > STAGES.index("static-cache")

    @property
    def failed(self) -> bool:
        """A wrong answer or a crash where the eager static-cache decode works: what the zoo exists to catch."""
        return self.status in FAILED and self.static_cache_works


def _one_line(err: BaseException) -> str:
    text = " ".join(str(err).split()) or type(err).__name__
    return f"{type(err).__name__}: {text[:300]}"


def build_model(config: PreTrainedConfig, device: torch.device, dtype: torch.dtype) -> torch.nn.Module:
    torch.manual_seed(0)
    with torch.device(device):
        try:
            model = AutoModelForCausalLM.from_config(config, dtype=dtype, attn_implementation="sdpa")
        except ValueError:  # no sdpa for this architecture
            model = AutoModelForCausalLM.from_config(config, dtype=dtype, attn_implementation="eager")
    return model.eval()


class _Entry:
    """One zoo entry's progress: the stage it reached, reported as it goes."""

    def __init__(self, model_type: str, report: Callable[[str], None]):
        self.result = ZooResult(model_type, status="crashed")
        self.report = report
        self.start = time.perf_counter()

    def reach(self, stage: str) -> None:
        self.result.stage = stage
        self.report(stage)

    def finish(self, status: str, reason: str = "") -> ZooResult:
        self.result.status, self.result.reason = status, reason
        self.result.seconds = round(time.perf_counter() - self.start, 2)
        return self.result


def _decide_capture_verify(
    entry: _Entry,
    session: DecodeSession,
    device: torch.device,
    emulate: bool,
    steps: int,
    prompt_len: int,
    buckets: tuple[int, ...],
) -> ZooResult:
    entry.reach("hazards")
    decision = decide_regions(session, "auto", buckets[0])
    result = entry.result
    result.mode, result.islands, result.fixes = decision.regions.mode, len(decision.regions.islands), decision.fixes
    result.hazards = list(dict.fromkeys(f"{h.kind} in {h.module_class}" for h in decision.hazards))
    if result.mode == "eager":
        return entry.finish("eager", decision.regions.reason)
    entry.reach("capture")
    islands = [session.model.get_submodule(path) for path in decision.regions.islands]
    graphs = capture_decode_graphs(session, backend_for(device, emulate), buckets, islands=islands)
    entry.reach("verify")
    rows = verify_graphs(graphs, steps=steps, prompt_len=prompt_len)
    result.verify_max_abs = max(row.max_abs for row in rows)
    result.verify_passed = all(row.passed for row in rows)
    entry.reach("done")
    failed = next((row for row in rows if not row.passed), None)
    if failed:
        return entry.finish("verify-failed", f"bucket {failed.bucket}, batch {failed.batch}: {failed.detail[:300]}")
    return entry.finish(result.mode)


def run_zoo_entry(
    model_type: str,
    device: torch.device | str = "cpu",
    emulate: bool = False,
    steps: int = 8,
    prompt_len: int = 6,
    buckets: tuple[int, ...] = (1, 2, 4),
    report: Callable[[str], None] = lambda stage: None,
) -> ZooResult:
    """Build, open a static-cache session, decide as `--mode auto`, capture, verify; never raises."""
    with quiet():
        return _run_entry(_Entry(model_type, report), torch.device(device), emulate, steps, prompt_len, buckets)


def _run_entry(
    entry: _Entry, device: torch.device, emulate: bool, steps: int, prompt_len: int, buckets: tuple[int, ...]
) -> ZooResult:
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    try:
        entry.reach("config")
        config = tiny_config(entry.result.model_type)
        entry.reach("load")
        model = build_model(config, device, dtype)
        entry.result.features = model_features(model)
    except Exception as err:  # noqa: BLE001 - any failure to build is the entry's answer
        return entry.finish("load-failed", f"{entry.result.stage}: {_one_line(err)}")
    try:
        entry.reach("static-cache")
        session = DecodeSession(model, max(buckets), CACHE_LEN)
    except UnsupportedModelError as err:  # the library's own verdict: this model has no static-cache decode
        return entry.finish("no-static-cache", err.message)
    except Exception as err:  # noqa: BLE001 - anything else escaped the library's checks: report it as such
        return entry.finish("crashed", f"static-cache: {_one_line(err)}")
    try:
        return _decide_capture_verify(entry, session, device, emulate, steps, prompt_len, tuple(sorted(buckets)))
    except Exception as err:  # noqa: BLE001 - a failure past a working static cache is ours to report
        return entry.finish("crashed", f"{entry.result.stage}: {_one_line(err)}")


def _child_command(model_type: str, device: torch.device | str, emulate: bool, steps: int) -> list[str]:
    command = [
        sys.executable,
        "-m",
        "accelerate_graph.zoo.run",
        "--one",
        model_type,
        "--device",
        str(device),
        "--steps",
        str(steps),
        "--json",
    ]
    return command + (["--emulate"] if emulate else [])


def _child_env(settings: engine_settings.Settings) -> dict[str, str]:
    """The parent's environment and `settings`, with this package importable whether or not it is installed."""
    root = str(Path(__file__).resolve().parents[2])
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    return {
        **os.environ,
        **engine_settings.to_environment(settings),
        "PYTHONPATH": os.pathsep.join([root, *[p for p in paths if p != root]]),
    }


def _crashed(model_type: str, stderr: str, why: str, seconds: float) -> ZooResult:
    stages = [line.split(STAGE_MARK, 1)[1].strip() for line in stderr.splitlines() if STAGE_MARK in line]
    tail = [line for line in stderr.splitlines() if line.strip() and STAGE_MARK not in line][-3:]
    stage = stages[-1] if stages and stages[-1] in STAGES else "config"
    reason = f"{why} during {stage}" + (f": {' | '.join(tail)[-400:]}" if tail else "")
    return ZooResult(model_type, "crashed", stage=stage, seconds=round(seconds, 2), reason=reason)


def run_isolated(
    model_type: str,
    device: torch.device | str,
    emulate: bool = False,
    steps: int = 8,
    timeout: float = ENTRY_TIMEOUT_S,
    settings: engine_settings.Settings | None = None,
) -> ZooResult:
    """run_zoo_entry in a child process (under `settings`, None: those in use): a crash, a poisoned CUDA
    context or a hang ends only the child."""
    start = time.perf_counter()
    try:
        done = subprocess.run(
            _child_command(model_type, device, emulate, steps),
            capture_output=True,
            text=True,
            timeout=timeout,
            env=_child_env(settings if settings is not None else engine_settings.current()),
        )
    except subprocess.TimeoutExpired as err:
        stderr = err.stderr.decode(errors="replace") if isinstance(err.stderr, bytes) else (err.stderr or "")
        return _crashed(model_type, stderr, f"timed out after {timeout:.0f} s", time.perf_counter() - start)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if not lines:
        return _crashed(
            model_type, done.stderr, f"child exited with code {done.returncode}", time.perf_counter() - start
        )
    result = ZooResult(**json.loads(lines[-1]))
    if done.returncode != 0:  # the result was printed, then exit failed (a poisoned CUDA context, say)
        result.reason = f"{result.reason} (child exited with code {done.returncode})".strip()
    return result


def run_zoo(
    types: Sequence[str],
    device: torch.device | str = "cpu",
    emulate: bool = False,
    steps: int = 8,
    isolate: bool = False,
    workers: int = 1,
    timeout: float = ENTRY_TIMEOUT_S,
    on_result: Callable[[ZooResult], None] = lambda result: None,
    settings: engine_settings.Settings | None = None,
) -> list[ZooResult]:
    """Every type in `types`, in order, under `settings` (None: those in use); not decoder-only ones come
    back "skipped" without running."""
    settings = settings if settings is not None else engine_settings.current()
    device = torch.device(device)
    skipped = skipped_model_types()

    def one(model_type: str) -> ZooResult:
        if model_type in skipped:
            result = ZooResult(model_type, "skipped", reason=skipped[model_type])
        elif isolate:
            result = run_isolated(model_type, device, emulate, steps, timeout, settings)
        else:
            with engine_settings.use(settings):
                result = run_zoo_entry(model_type, device, emulate, steps)
        on_result(result)
        return result

    if workers <= 1 or not isolate:  # threads only help while children do the work
        return [one(t) for t in types]
    with ThreadPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(one, types))


def _main(argv: Sequence[str] | None = None) -> None:
    """The child side of run_isolated: one entry, its stages on stderr, its result as one JSON line."""
    parser = argparse.ArgumentParser(prog="python -m accelerate_graph.zoo.run")
    parser.add_argument("--one", required=True)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--emulate", action="store_true")
    parser.add_argument("--json", action="store_true", help="print the result as one JSON line (run_isolated)")
    args = parser.parse_args(argv)

    def report(stage: str) -> None:
        print(f"{STAGE_MARK} {stage}", file=sys.stderr, flush=True)

    with engine_settings.use(engine_settings.resolve()):  # the parent passes its settings in the environment
        result = run_zoo_entry(args.one, resolve_device(args.device), args.emulate, args.steps, report=report)
    if args.json:
        print(json.dumps(asdict(result)), flush=True)
    else:
        print(f"{result.model_type}: {result.status} {result.reason}".rstrip(), flush=True)


if __name__ == "__main__":
    _main()
