"""Which op makes a bf16 graph replay differ from eager? Compares single ops eager vs replayed.

Run on a GPU: python3 benchmarks/diagnose_replay_drift.py
"""

import functools

import torch
import torch.nn.functional as F

from accelerate_graph.verify.reference import eager_step


def graph_of(fn):
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = fn()
    return g, out


def compare(name, fn):
    eager = fn().clone()
    g, out = graph_of(fn)
    g.replay()
    torch.cuda.synchronize()
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        on_side = fn().clone()
    torch.cuda.synchronize()
    print(
        f"{name:40s} replay-eager {(out.float() - eager.float()).abs().max().item():.3e}  "
        f"side-stream-eager {(on_side.float() - eager.float()).abs().max().item():.3e}"
    )


torch.manual_seed(0)
dev = "cuda"
for m in (1, 8, 32):
    x = torch.randn(m, 896, device=dev, dtype=torch.bfloat16)
    w = torch.randn(4864, 896, device=dev, dtype=torch.bfloat16) * 0.02
    compare(f"linear bf16 M={m} 896->4864", lambda: F.linear(x, w))
    w2 = torch.randn(151936, 896, device=dev, dtype=torch.bfloat16) * 0.02
    compare(f"lm_head bf16 M={m}", lambda: F.linear(x, w2))
    q = torch.randn(m, 14, 1, 64, device=dev, dtype=torch.bfloat16)
    k = torch.randn(m, 14, 1024, 64, device=dev, dtype=torch.bfloat16)
    mask = torch.ones(m, 1, 1, 1024, device=dev, dtype=torch.bool)
    mask[..., 200:] = False
    compare(f"sdpa bf16 B={m} masked", lambda: F.scaled_dot_product_attention(q, k, k, attn_mask=mask))
print("allow_bf16_reduced_precision_reduction", torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction)

# The whole decode step of the Qwen2.5-0.5B shape: 8 steps from the same cache state, eager twice
# and replayed, with the worst logit difference per step.
from accelerate_graph.core.backends import backend_for  # noqa: E402
from accelerate_graph.core.capture import capture_decode_graphs  # noqa: E402
from accelerate_graph.core.decode_session import DecodeSession  # noqa: E402
from accelerate_graph.models.loading import load_model  # noqa: E402

loaded = load_model("qwen2.5-0.5b", torch.device(dev), torch.bfloat16)
session = DecodeSession(loaded.model, 8, 1024)
graphs = capture_decode_graphs(session, backend_for(torch.device(dev)), (8,))
session.prefill(torch.randint(0, 1000, (8, 128)))
snap = session.kv.snapshot(8)
tokens = torch.randint(0, 1000, (8, 8), device=dev)


def run(step):
    session.kv.restore(snap)
    return [
        step(tokens[i], torch.full((8,), 128 + i, device=dev)).float().clone() for i in range(8)
    ], session.kv.snapshot(8)


names = ["eager1", "eager2", "replay1", "eager3", "replay2", "eager4"]
results = {
    name: run(functools.partial(eager_step, graphs.session) if name.startswith("eager") else graphs.run)[0]
    for name in names
}
for name in names:
    diffs = [f"{(results[name][i] - results['eager1'][i]).abs().max().item():.1e}" for i in range(8)]
    print(f"{name:8s} vs eager1 per step: {' '.join(diffs)}")
print(
    "sdpa backends: flash",
    torch.backends.cuda.flash_sdp_enabled(),
    "mem_eff",
    torch.backends.cuda.mem_efficient_sdp_enabled(),
    "cudnn",
    torch.backends.cuda.cudnn_sdp_enabled(),
)
