"""What the skinny kernels launch in a captured fused step, per batch: op, rows, config, grid, the inputs'
16-byte alignment and strides, and the Triton variants compiled (stop 29: Qwen2.5-0.5B's batch 16 with
every op skinny replays in 0.875 ms when its buckets are 8,16,32 and 1.086 ms when they are 1,8,16,32, the
same 199 kernels; the skinny kernels alone are slower: what differs in their launches?).

Under PDL only (the H200's default): there the opaque ops run their launches with real tensors; with PDL
off inductor traces the triton_op with fake ones, whose data_ptr this would read.

Run on a GPU: PYTHONPATH=. CUGRAPH_ACCEL_SKINNY_BATCHES=1 python3 benchmarks/skinny_launches.py qwen2.5-0.5b --batches 1,8,16,32
"""

from __future__ import annotations

import argparse

from accelerate_graph.fused.kernels import pdl, skinny_kernels, skinny_matmul
from benchmarks.profile_step import replay_ms
from benchmarks.timing_gap import fused_graphs


def recording_launch(seen: dict):
    """skinny_matmul.launch wrapped: each distinct launch (op, rows, shapes, config, alignments) recorded once."""
    launch = skinny_matmul.launch

    def recorded(op, x, norm_weight, eps, norm_kind, weights, biases, residual=None, activation="silu", cfg=None):
        k = x.shape[-1]
        m = x.numel() // k
        ns = tuple(int(w.shape[0]) for w in weights)
        chosen = cfg or skinny_matmul.launch_config(op, m, ns, k, x.device)  # what launch will run
        tensors = {"x": x, "residual": residual, **{f"w{i}": w for i, w in enumerate(weights)}}
        layout = " ".join(
            f"{name}:{t.data_ptr() % 16}/{'c' if t.is_contiguous() else 'nc' + str(t.stride())}"
            for name, t in tensors.items()
            if t is not None
        )
        early = bool(pdl.launch_options(x.device))  # what the launch passes: USE_PDL and launch_pdl
        key = (op, m, ns, k, str(chosen), layout, f"pdl={early}")
        seen[key] = seen.get(key, 0) + 1
        return launch(op, x, norm_weight, eps, norm_kind, weights, biases, residual, activation, cfg)

    return recorded


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", help="model[:cache], cache 1024 by default")
    parser.add_argument("--batches", default="1,8,16,32")
    parser.add_argument("--prompt", type=int, default=128)
    args = parser.parse_args()
    model, _, cache = args.model.partition(":")
    batches = [int(b) for b in args.batches.split(",")]
    seen: dict = {}
    skinny_matmul.launch = recording_launch(seen)
    session, graphs = fused_graphs(model, int(cache or 1024), batches, args.prompt, "nothing")
    for batch in batches:
        ms, _ = replay_ms(graphs, session, batch, args.prompt)
        print(f"{model} buckets {args.batches} batch {batch}: replay {ms:.3f} ms")
    print("launches (calls: op, rows, outputs, inputs, config, tensor:pointer mod 16/layout):")
    for key, calls in sorted(seen.items(), key=lambda item: (item[0][1], item[0][0])):
        print(f"  {calls:5d}  {key}")
    for kernel in (skinny_kernels.skinny_kernel, skinny_kernels.finish_kernel):
        for device, entry in getattr(kernel, "device_caches", {}).items():
            compiled = entry[0] if isinstance(entry, tuple) else entry
            print(f"{kernel.fn.__name__} on {device}: {len(compiled)} variants")
            for variant in compiled.values():
                print(f"    {describe_variant(kernel, variant)}")


WATCHED = tuple("M USE_PDL MODE NUM_W SPLIT USE_DOT SWAP BLOCK_M BLOCK_N BLOCK_K NORM LOOKAHEAD".split())


def describe_variant(kernel, variant) -> str:
    """A compiled Triton variant in one line: the watched constexprs (M where it was specialized to one),
    and what the binary asks of a multiprocessor (registers, spills, shared memory) and how it launches."""
    names = list(getattr(kernel, "arg_names", []))
    constants = getattr(getattr(variant, "src", None), "constants", {}) or {}
    fields = {}
    for where, value in constants.items():
        index = where[0] if isinstance(where, tuple) and where else where
        name = names[index] if isinstance(index, int) and index < len(names) else str(index)
        if name in WATCHED:
            fields[name] = value
    meta = getattr(variant, "metadata", None)
    for attribute in ("num_warps", "num_stages", "shared", "launch_pdl", "launch_cooperative_grid"):
        if hasattr(meta, attribute):
            fields[attribute] = getattr(meta, attribute)
    for attribute in ("n_regs", "n_spills"):
        fields[attribute] = getattr(variant, attribute, "?")
    return " ".join(f"{key}={value}" for key, value in fields.items())


if __name__ == "__main__":
    main()
