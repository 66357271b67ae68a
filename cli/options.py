"""Options shared by several commands, defined once."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from accelerate_graph.settings import ENV_PREFIX

# core/plan.py's default, repeated so that --help needs no torch (a test checks they agree)
DEFAULT_PLAN_PATH = Path("cugraph-accel.plan.yaml")

ModelArg = Annotated[
    str | None,
    typer.Argument(
        help="A built-in recipe (see `cugraph-accel recipes`), a recipe .yaml, a local model folder, "
        "or a Hugging Face hub id."
    ),
]
BucketsOpt = Annotated[str | None, typer.Option("--buckets", help="Batch-size buckets, e.g. 1,8,16,32.")]
PlanOpt = Annotated[Path | None, typer.Option("--plan", help="Plan file (default ./cugraph-accel.plan.yaml).")]
DtypeOpt = Annotated[str, typer.Option("--dtype", help="auto (bf16 on GPU, fp32 on CPU), bf16, fp16 or fp32.")]
DeviceOpt = Annotated[str, typer.Option("--device", help="auto, cpu, cuda or cuda:N.")]
AttnOpt = Annotated[
    str,
    typer.Option(
        "--attn",
        help="Attention implementation: sdpa (eager where unsupported), eager, or grouped (sdpa for the "
        "prompt; decode steps attend grouped-query heads without repeating K/V).",
    ),
]
ContextsOpt = Annotated[
    str | None,
    typer.Option(
        "--context-buckets",
        help="Graphs whose attention reads only the first C cache slots, e.g. 256,512; auto (default: "
        "powers of two from 256 up to the cache length) or full (one graph per batch: the whole cache).",
    ),
]
FuseFlag = Annotated[
    bool,
    typer.Option(
        "--fuse",
        help="Compile the step with inductor (fused kernels, no inductor graphs) before capturing it; "
        "compiled kernels are kept next to the plan for verify and bench.",
    ),
]
CacheLenOpt = Annotated[int | None, typer.Option("--max-cache-len", min=2, help="Static KV cache slots per row.")]
PromptLenOpt = Annotated[int | None, typer.Option("--prompt-len", min=1, help="Prompt tokens before decoding.")]
RevisionOpt = Annotated[str | None, typer.Option("--revision", help="Hub revision (branch, tag or commit).")]
JsonOpt = Annotated[
    str | None,
    typer.Option(
        "--json",
        metavar="PATH",
        help="Also write the results as one JSON document to PATH; `-` prints it on standard output "
        "(the tables then go to standard error).",
    ),
]
ForceFlag = Annotated[
    bool,
    typer.Option("--force", help="Replace an output file even if it holds a plan, a recipe or a model file."),
]
WeightsOpt = Annotated[
    str | None,
    typer.Option(
        "--weights",
        metavar="KIND",
        help="model (default: the weights as loaded), fp8 (the decoder's Linear layers in FP8 e4m3, a scale per "
        "output channel) or fp8-block (a scale per 128x128 block); needs --dtype bf16 or fp16 (docs/FP8.md). "
        "A plan replays the weights it was captured with.",
    ),
]
EmulateFlag = Annotated[bool, typer.Option("--emulate", help="Use the graph emulation even on a GPU.")]


def buckets_or_none(text: str | None) -> tuple[int, ...] | None:
    from accelerate_graph.core.buckets import parse_buckets

    return parse_buckets(text) if text is not None else None


def contexts_or_auto(text: str | None) -> tuple[int, ...] | None:
    from accelerate_graph.core.buckets import parse_context_buckets

    return parse_context_buckets(text) if text is not None else None


AllReduceOpt = Annotated[
    str | None,
    typer.Option(
        "--allreduce",
        metavar="KIND",
        help="Under --tp: how the ranks sum each row-wise layer: auto (default: oneshot on CUDA, else nccl), "
        "nccl, or oneshot (one kernel over peer-mapped buffers, torch's symmetric memory; CUDA only, else "
        "the group's own collective).",
    ),
]
SetOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--set",
        metavar="NAME=VALUE",
        help="Set one engine setting for this run, e.g. --set pdl=off (repeatable; `cugraph-accel settings` "
        f"lists them). Wins over the environment's {ENV_PREFIX}<NAME> and a plan's recorded settings.",
    ),
]
TpOpt = Annotated[
    int | None,
    typer.Option(
        "--tp",
        min=1,
        help="Tensor-parallel ranks: N processes (one GPU each; gloo on the CPU), the model split by its "
        "tensor-parallel plan (default 1; verify and bench: the plan's). Inside torchrun: its WORLD_SIZE.",
    ),
]
