"""The fastest a decode step could possibly be: the bytes it must move over the memory bandwidth.

A decode step must read every weight it uses once and the KV slots its rows have written (the
prompt and the tokens since), and write one new K and V per layer and row. A mixture-of-experts
layer uses only the experts its tokens are routed to: at least top_k distinct ones (one token's
choice), at most min(experts, batch x top_k). The routing of a step is not known in advance, so the
floor counts the least a step can read, top_k routed experts per layer at any batch (shared experts
and routers are read whole): a lower bound whatever the routing, and the most is reported beside it. A step that reads the whole static
cache, written or not, moves more than that: the floor counts what any step must move, so context
buckets show up as a step closer to it. The bandwidth is measured in the same run by a large copy,
so the floor moves with the machine it runs on.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

import torch

from accelerate_graph.bench.timing import wall_seconds
from accelerate_graph.core.decode_session import DecodeSession

GIB = 1024**3
MIB = 1024**2
COPY_BYTES = {"cuda": 1 * GIB, "cpu": 256 * MIB}  # per buffer; big enough that caches do not matter
COPY_REPEATS = 10


@dataclass
class Bandwidth:
    bytes_per_s: float
    copy_bytes: int  # size of one buffer; a copy reads and writes it
    repeats: int
    method: str

    @property
    def gb_per_s(self) -> float:
        return self.bytes_per_s / 1e9


def _copy_seconds(dst: torch.Tensor, src: torch.Tensor, device: torch.device) -> list[float]:
    for _ in range(2):  # warm-up: first touch of the pages, clocks ramping up
        dst.copy_(src)
    if device.type != "cuda":
        return [wall_seconds(lambda: dst.copy_(src), device) for _ in range(COPY_REPEATS)]
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(COPY_REPEATS)]
    for start, end in events:
        start.record()
        dst.copy_(src)
        end.record()
    torch.cuda.synchronize(device)
    return [start.elapsed_time(end) / 1000.0 for start, end in events]


def measure_bandwidth(device: torch.device, copy_bytes: int | None = None) -> Bandwidth:
    """Median bytes/s of a device-to-device copy (bytes read + bytes written over the time)."""
    size = copy_bytes or COPY_BYTES["cuda" if device.type == "cuda" else "cpu"]
    src = torch.ones(size, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    seconds = statistics.median(_copy_seconds(dst, src, device))
    del src, dst
    if device.type == "cuda":
        torch.cuda.empty_cache()
        method = f"device-to-device copy of {size / GIB:g} GiB on {device} (CUDA events)"
    else:
        method = f"host memory copy of {size / MIB:g} MiB on the CPU (host clock; not a GPU bandwidth)"
    return Bandwidth(2 * size / seconds, size, COPY_REPEATS, method)


@dataclass
class StepBytes:
    weights: int  # the least a step must read: every weight but the routed experts, + top_k of them per layer
    kv_read: int
    kv_written: int
    expert_bytes: int = 0  # one routed expert's weights, summed over the MoE layers
    experts_min: int = 0  # routed experts a step reads per layer, at least (top_k)
    experts_max: int = 0  # ... and at most (min(experts, batch x top_k))

    @property
    def total(self) -> int:
        return self.weights + self.kv_read + self.kv_written

    @property
    def weights_max(self) -> int:
        """What the weights could cost when every row routes to experts no other row uses."""
        return self.weights + (self.experts_max - self.experts_min) * self.expert_bytes


def _routing(model: torch.nn.Module) -> tuple[int, int]:
    """(routed experts per layer, experts per token) from the config; (0, 0) for a dense model."""
    text = model.config.get_text_config()
    experts = next((getattr(text, k) for k in ("num_experts", "num_local_experts", "n_routed_experts")
                    if isinstance(getattr(text, k, None), int)), 0)  # fmt: skip
    top_k = next((getattr(text, k) for k in ("num_experts_per_tok", "moe_topk", "top_k")
                  if isinstance(getattr(text, k, None), int)), 0)  # fmt: skip
    return (experts, top_k) if experts and top_k else (0, 0)


def routed_expert_bytes(model: torch.nn.Module, experts: int) -> int:
    """Bytes of all routed experts of every layer: parameters under a module named `experts` (a fused
    [experts, ...] tensor, or a list of expert modules); shared experts and routers are not among them."""
    total = 0
    for name, param in model.named_parameters():
        parts = name.split(".")
        if "experts" not in parts[:-1]:
            continue
        after = parts[parts.index("experts") + 1]
        if after.isdigit() or (param.dim() >= 2 and param.shape[0] == experts):
            total += param.nbytes
    return total


def weight_bytes(model: torch.nn.Module, batch: int) -> int:
    """Each distinct parameter storage once (tied weights count once). An input embedding that is not
    tied to the output head is a gather: a step reads only `batch` of its rows."""
    storages: dict[int, int] = {}
    for param in model.parameters():
        storage = param.untyped_storage()
        storages[storage.data_ptr()] = storage.nbytes()
    embedding = getattr(model.get_input_embeddings(), "weight", None)
    if embedding is None:
        return sum(storages.values())
    pointer = embedding.untyped_storage().data_ptr()
    # parameters() lists a tied weight once; with duplicates kept, a tie shows as a second name
    users = sum(p.untyped_storage().data_ptr() == pointer for _, p in model.named_parameters(remove_duplicate=False))
    if users == 1:
        storages[pointer] = batch * embedding.shape[1] * embedding.element_size()
    return sum(storages.values())


def kv_bytes(layers: list, batch: int, slots: int) -> tuple[int, int]:
    """(read, written) KV bytes of one step for `batch` rows attending `slots` cache slots, from the
    cache tensors ([B, H, L, D] each)."""
    read = written = 0
    for layer in layers:
        for tensor in (layer.keys, layer.values):
            _, heads, _, dim = tensor.shape
            row_slot = heads * dim * tensor.element_size()  # one row, one slot
            read += batch * slots * row_slot
            written += batch * row_slot
    return read, written


def step_bytes(session: DecodeSession, batch: int, slots: int) -> StepBytes:
    """What a step of `batch` rows must move when its rows have `slots` KV slots to attend."""
    read, written = kv_bytes(session.kv.layers, batch, slots)
    weights = weight_bytes(session.model, batch)
    experts, top_k = _routing(session.model)
    if not experts:
        return StepBytes(weights, read, written)
    routed = routed_expert_bytes(session.model, experts)
    one = routed // experts
    least, most = min(experts, top_k), min(experts, batch * top_k)
    return StepBytes(weights - routed + least * one, read, written, one, least, most)


def floor_ms(moved: StepBytes, bandwidth: Bandwidth) -> float:
    return moved.total / bandwidth.bytes_per_s * 1000.0


def describe_floor(batch: int, moved: StepBytes, bandwidth: Bandwidth) -> dict:
    """One bucket's floor with the arithmetic behind it, for the report."""
    return {
        "bucket": batch,
        "weight_bytes": moved.weights,
        "kv_read_bytes": moved.kv_read,
        "kv_written_bytes": moved.kv_written,
        "total_bytes": moved.total,
        "floor_ms": floor_ms(moved, bandwidth),
        "expert_bytes": moved.expert_bytes,  # one routed expert, all MoE layers (0: dense)
        "experts_read_min": moved.experts_min,  # per layer, counted in the floor
        "experts_read_max": moved.experts_max,  # per layer, at most: the floor with these
        "floor_max_routing_ms": (moved.total - moved.weights + moved.weights_max) / bandwidth.bytes_per_s * 1000.0,
    }
