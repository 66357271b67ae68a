"""Runs the decode-attention kernel under the Triton interpreter, in its own process: TRITON_INTERPRET
must be set before triton is imported, and the test process may have imported triton for real already
(inductor, GPU runs). Reads a job as JSON on stdin, writes its results as JSON on stdout.

Jobs: {"cases": [...]} -> {case id: errors}; {"compile": true} -> graph counts of the op under dynamo;
{"model": true} -> a tiny model's decode logits with the kernel against the matmul path;
{"cache_reads": true} -> the ops inductor's generated code calls, their arguments, and its copies.
"""

import json
import os
import sys

os.environ["TRITON_INTERPRET"] = "1"

import torch  # noqa: E402
from attention_cases import Attention, inputs, reference  # noqa: E402

from accelerate_graph import settings  # noqa: E402
from accelerate_graph.fused import grouped_attention  # noqa: E402
from accelerate_graph.fused.kernels import decode_attention as kernel  # noqa: E402


def run_case(case: dict) -> dict:
    query, key, value, mask = inputs(case)
    scale, softcap = query.shape[-1] ** -0.5, case.get("softcap", 0.0)
    config = kernel.DecodeConfig(block_l=case["block_l"], num_warps=4, splits=case["splits"])
    mask_kind = (
        kernel.NO_MASK if mask is None else kernel.BOOL_MASK if mask.dtype == torch.bool else kernel.ADDITIVE_MASK
    )
    # the bucket in one tile, loaded before the wait, where the case asks: at its batch, whatever the default's
    chosen = settings.DEFAULTS.replace(
        attention_preloaded=case.get("preloaded", 0), attention_preloaded_batch=query.shape[0]
    )
    with settings.use(chosen):
        preloaded = kernel.preloaded_parts(query.shape[0], query.shape[3], key.shape[2], mask_kind)
        out = kernel.launch(query, key, value, mask, scale, softcap, config)
    expected = reference(query, key, value, mask, scale, softcap)
    live = torch.ones(query.shape[0], dtype=torch.bool)
    if case.get("dead_row") is not None:
        live[case["dead_row"]] = False
    result = {
        "shape": list(out.shape),
        "dtype": str(out.dtype).removeprefix("torch."),
        "vs_reference": (out.float() - expected)[live].abs().max().item(),
        "dead_rows_max": out[~live].float().abs().max().item() if (~live).any() else 0.0,
        "preloaded_parts": preloaded,  # > 0: _decode_preloaded_kernel ran, not the split kernel
    }
    if not softcap:  # the matmul path has no softcapping (it falls back to sdpa, which refuses it)
        current, _ = grouped_attention.grouped_decode_attention(Attention().eval(), query, key, value, mask, 0.0, scale)
        result["vs_current"] = (out.float() - current.float())[live].abs().max().item()
        result["current_vs_reference"] = (current.float() - expected)[live].abs().max().item()
    return result


def compile_counts() -> dict:
    """The op inside torch.compile as fused mode compiles its layers: K/V views of one static cache with
    batch and context dynamic. One graph for every batch > 1 and every context length, one for batch 1."""
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    @torch.compile(backend=backend, fullgraph=True)
    def attend(query, key, value, mask):
        return torch.ops.cugraph_accel.decode_attention(query, key, value, mask, 0.125, 0.0) * 2

    cache = torch.randn(2, 4, 2, 97, 64)  # [K|V, B, Hkv, S, d]
    errors = []
    for b, length in [(2, 32), (3, 48), (4, 80), (1, 32), (1, 64)]:
        query, _, _, mask = inputs({"b": b, "hq": 14, "hkv": 2, "d": 64, "L": length, "mask": "bool"})
        key, value = cache[0, :b, :, :length], cache[1, :b, :, :length]
        for tensor in (query, key, value, mask):
            torch._dynamo.maybe_mark_dynamic(tensor, 0)
        for tensor in (key, value):
            torch._dynamo.maybe_mark_dynamic(tensor, 2)
        torch._dynamo.maybe_mark_dynamic(mask, 3)
        out = attend(query, key, value, mask)
        errors.append((out / 2 - reference(query, key, value, mask, 0.125, 0.0)).abs().max().item())
    return {"graphs": len(graphs), "max_error": max(errors)}


def model_logits(splits: str = "fixed", split_slots: int | None = None) -> dict:
    """A tiny GQA model through grouped attention, the kernel switched on and off: decode logits of each
    batch/context case from one cache state, eager and under fused mode's compiled layers (aot_eager), with the
    attention_splits setting `splits` (and `split_slots` slots a split at least under "length"). Also the
    splits each call of the kernel ran."""
    from tiny_models import tiny_decoder

    from accelerate_graph.core.decode_session import DecodeSession
    from accelerate_graph.fused.layers import FusedForward

    model = tiny_decoder("qwen2")
    grouped_attention.use_grouped_attention(model)
    session = DecodeSession(model, 4, 64)
    cases = [(4, 32), (1, 16), (3, 64)]  # two batches above 1 (one graph, other contexts) and batch 1
    prompt = torch.randint(0, 256, (4, 6), generator=torch.Generator().manual_seed(1))
    with settings.use(settings.DEFAULTS.replace(triton_attention=False)):
        matmul = session.first_steps(prompt, cases)
    calls, splits_run = [], set()
    original = kernel.launch
    if split_slots:
        kernel.SPLIT_SLOTS = split_slots

    def counted(*args, **kwargs):
        if args[7] if len(args) > 7 else kwargs.get("run", True):  # not the shape-only calls while tracing
            calls.append(args[0].shape[0])
            splits_run.add(args[6].splits)
        return original(*args, **kwargs)

    kernel.launch = counted
    with settings.use(settings.DEFAULTS.replace(triton_attention=True, attention_splits=splits)):
        eager = session.first_steps(prompt, cases)
        fused = FusedForward(model, backend="aot_eager")
        compiled = session.first_steps(prompt, cases, fused)
    return {
        "kernel_calls": len(calls),
        "eager_vs_matmul": max((a - b).abs().max().item() for a, b in zip(eager, matmul)),
        "compiled_vs_matmul": max((a - b).abs().max().item() for a, b in zip(compiled, matmul)),
        "graphs": fused.graphs,
        "recompiles": fused.recompiles,
        "splits": sorted(splits_run),
    }


def cache_reads() -> dict:
    """Inductor (CPU) compiles a tiny model's decode layer with the kernel on: the ops its generated code
    calls and their arguments, and every line that copies. K and V should be the cache itself (graph
    inputs, `argN_1`), not copies (`bufN`)."""
    import re

    from generated_code import top_level_arguments
    from tiny_models import tiny_decoder

    from accelerate_graph.compat.torch_internals import inductor_config_patched, inductor_generated_code
    from accelerate_graph.core.decode_session import DecodeSession
    from accelerate_graph.fused.layers import FusedForward

    model = tiny_decoder("qwen2")
    grouped_attention.use_grouped_attention(model)
    session = DecodeSession(model, 2, 64)
    prompt = torch.randint(0, 256, (2, 6), generator=torch.Generator().manual_seed(1))
    with settings.use(settings.DEFAULTS.replace(triton_attention=True)):
        fused = FusedForward(model, backend="inductor")
        with inductor_config_patched({"force_disable_caches": True}):  # its FX graph cache does not key on op tags
            _, code = inductor_generated_code(session.first_steps, prompt, [(2, 32)], fused)
    calls = []
    for source in code:
        for found in re.finditer(r"cugraph_accel\.(decode_attention\w*)\.default\(", source):
            calls.append([found.group(1), top_level_arguments(source, found.end())])
    copies = [line.strip() for source in code for line in source.splitlines() if re.search(r"copy_|clone", line)]
    return {"calls": calls, "copies": copies}


def main() -> None:
    job = json.load(sys.stdin)
    if "cases" in job:
        result = {case["id"]: run_case(case) for case in job["cases"]}
    elif job.get("compile"):
        result = compile_counts()
    elif job.get("cache_reads"):
        result = cache_reads()
    else:
        result = model_logits(job.get("attention_splits", "fixed"), job.get("split_slots"))
    json.dump(result, sys.stdout)


if __name__ == "__main__":
    main()
