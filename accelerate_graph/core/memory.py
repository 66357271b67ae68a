"""Device memory: what a request needs (the preflight, before the cache and graphs are allocated), what a
command used (its peak), and the stated bound between them.

The bound: weights + one KV cache + the graph pool + the largest bucket's activations + a margin. One
cache serves every bucket, context and contender (the eager reference and the replay share it), and
checks copy only the cache rows and slots they write (SharedStaticCache.snapshot), so nothing in a
command scales with a second cache. What HF generate allocates for itself (its own static cache) and
what torch.compile's cudagraph trees hold are named as parts of their own when a bench runs them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import torch

GIB = 2**30
MARGIN_BYTES = GIB // 2  # the allocator's rounding and fragmentation, cuBLAS workspaces, small buffers
MARGIN_SHARE = 0.03  # ... and a share of the whole for block rounding of large tensors
COMPILE_WORKSPACE = 2 * GIB  # inductor's autotuning buffers and its first runs (--fuse, compile)
SPARE_SLOTS = 1  # SharedStaticCache's spare slot


@dataclass(frozen=True)
class Geometry:
    """The sizes of a decoder that decide its transient memory, from its config."""

    layers: int
    hidden: int
    q_heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    top_k: int = 0  # routed experts per token (0: dense)
    expert_intermediate: int = 0
    experts: int = 0

    @classmethod
    def of(cls, config) -> Geometry | None:
        text = config.get_text_config() if hasattr(config, "get_text_config") else config
        try:
            hidden = int(text.hidden_size)
            q_heads = int(text.num_attention_heads)
            return cls(
                layers=int(text.num_hidden_layers),
                hidden=hidden,
                q_heads=q_heads,
                kv_heads=int(getattr(text, "num_key_value_heads", None) or q_heads),
                head_dim=int(getattr(text, "head_dim", None) or hidden // q_heads),
                intermediate=int(
                    getattr(text, "intermediate_size", None) or getattr(text, "n_inner", None) or 4 * hidden
                ),
                vocab=int(text.vocab_size),
                top_k=int(_first(text, "num_experts_per_tok", "moe_topk", "top_k") or 0),
                # OLMoE and Mixtral size each expert by intermediate_size
                expert_intermediate=int(_first(text, "moe_intermediate_size", "expert_intermediate_size") or 0)
                or int(getattr(text, "intermediate_size", 0) or 0),
                experts=int(_first(text, "num_experts", "num_local_experts", "n_routed_experts") or 0),
            )
        except (AttributeError, TypeError, ValueError):  # per-layer or non-standard configs
            return None

    def kv_bytes(self, batch: int, slots: int, dtype: torch.dtype) -> int:
        return 2 * self.layers * self.kv_heads * self.head_dim * batch * slots * _size(dtype)

    def tokens_bytes(self, tokens: int, slots: int, queries: int, dtype: torch.dtype) -> int:
        """The transient of one layer for `tokens` tokens (`queries` per row) attending `slots` slots,
        plus the residual stream and the last-position logits; a layer's transient is freed before the
        next layer's, so one layer counts."""
        s = _size(dtype)
        rows = max(tokens // max(queries, 1), 1)
        mlp = 3 * tokens * self.intermediate * s  # gate, up and their product
        if self.top_k:
            mlp = max(mlp, 3 * tokens * self.top_k * self.expert_intermediate * s) + tokens * self.experts * 4
        repeated_kv = 2 * rows * self.q_heads * slots * self.head_dim * s if self.q_heads != self.kv_heads else 0
        scores = 2 * rows * self.q_heads * queries * slots * 4  # eager / math attention: scores and softmax
        projections = tokens * (self.q_heads + 2 * self.kv_heads) * self.head_dim * s
        residual = 4 * tokens * self.hidden * s
        return mlp + repeated_kv + scores + projections + residual + 2 * rows * self.vocab * 4


def _first(config, *names):
    for name in names:
        value = getattr(config, name, None)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None


def _size(dtype: torch.dtype) -> int:
    return torch.finfo(dtype).bits // 8 if dtype.is_floating_point else 8


def weight_bytes(model: torch.nn.Module) -> int:
    """Every distinct parameter and buffer storage once (tied weights count once)."""
    storages = {}
    for tensor in [*model.parameters(), *model.buffers()]:
        storage = tensor.untyped_storage()
        storages[storage.data_ptr()] = storage.nbytes()
    return sum(storages.values())


@dataclass
class MemoryBudget:
    """Named parts, in bytes, and their sum: a preflight's need or a command's bound."""

    parts: dict[str, int] = field(default_factory=dict)

    @property
    def total(self) -> int:
        return sum(self.parts.values())

    def add(self, name: str, nbytes: int) -> None:
        self.parts[name] = self.parts.get(name, 0) + int(nbytes)

    def describe(self) -> str:
        return " + ".join(f"{name} {gib(value)}" for name, value in self.parts.items() if value)

    def record(self) -> dict:
        return {"total_bytes": self.total, "parts_bytes": dict(self.parts)}


def gib(nbytes: float) -> str:
    return f"{nbytes / GIB:.2f} GiB" if nbytes >= GIB else f"{nbytes / 2**20:.0f} MiB"


def activation_bytes(geometry: Geometry, batch: int, cache_len: int, prompt_len: int, dtype: torch.dtype) -> int:
    """The larger of a prefill of `prompt_len` tokens and a decode step, at `batch` rows."""
    slots = cache_len + SPARE_SLOTS
    prefill = geometry.tokens_bytes(batch * prompt_len, slots, prompt_len, dtype)
    return max(prefill, geometry.tokens_bytes(batch, slots, 1, dtype))


def kept_logits_bytes(geometry: Geometry, batch: int, steps: int, copies: int = 7) -> int:
    """float32 logits a check keeps to compare runs: replay, eager and the float32 reference, and the
    criterion's temporaries (log-softmaxes, differences): `copies` of `steps` steps of `batch` rows."""
    return copies * steps * batch * geometry.vocab * 4


def reference_bytes(
    model: torch.nn.Module, geometry: Geometry | None, batch: int, cache_len: int, prompt_len: int
) -> int:
    """The float32 reference's own memory (verify.reference): one module's parameters promoted to float32 at
    a time (the largest counts), and activations in float32 where the model's are narrower."""
    if model.dtype == torch.float32:
        return 0
    largest = max(
        (sum(p.numel() for p in m.parameters(recurse=False)) for m in model.modules()),
        default=0,
    )
    extra = 0
    if geometry is not None:
        extra = activation_bytes(geometry, batch, cache_len, prompt_len, torch.float32)
        extra -= activation_bytes(geometry, batch, cache_len, prompt_len, model.dtype)
    return 4 * largest + max(extra, 0)


def margin(parts_total: int) -> int:
    return MARGIN_BYTES + int(MARGIN_SHARE * parts_total)


def request_need(
    geometry: Geometry, dtype: torch.dtype, batch: int, cache_len: int, prompt_len: int, fuse: bool, steps: int = 8
) -> MemoryBudget:
    """Device memory a request needs beyond its weights: the cache, an estimate of the graph pool (one
    decode step's transient at the largest bucket: smaller buckets reuse its blocks), the largest
    bucket's activations and the logits its checks keep, the compile workspace under --fuse, a margin."""
    need = MemoryBudget()
    need.add("KV cache", geometry.kv_bytes(batch, cache_len + SPARE_SLOTS, dtype))
    need.add("graph pool (estimate)", geometry.tokens_bytes(batch, cache_len + SPARE_SLOTS, 1, dtype))
    need.add("activations", activation_bytes(geometry, batch, cache_len, prompt_len, dtype))
    need.add("kept logits", kept_logits_bytes(geometry, batch, steps))
    if dtype != torch.float32:  # the float32 reference: the LM head (or embedding) promoted, float32 activations
        need.add("float32 reference", 4 * geometry.vocab * geometry.hidden)
        extra = activation_bytes(geometry, batch, cache_len, prompt_len, torch.float32)
        need.add("float32 reference", extra - activation_bytes(geometry, batch, cache_len, prompt_len, dtype))
    if fuse:
        need.add("compile workspace", COMPILE_WORKSPACE)
    need.add("margin", margin(need.total))
    return need


def free_bytes(device: torch.device) -> tuple[int | None, str]:
    """(bytes this process can still allocate, where the number comes from); None with the reason
    where it cannot be known."""
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        cached = torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
        return free + cached, "free device memory (torch.cuda.mem_get_info) plus the allocator's cached blocks"
    if device.type == "cpu":
        available = _host_available()
        if available is None:
            return None, "host memory could not be read (no /proc/meminfo)"
        return available, "available host memory (MemAvailable, within the cgroup's limit)"
    return None, f"no free-memory query for {device.type} devices"


def _host_available() -> int | None:
    try:
        lines = Path("/proc/meminfo").read_text().splitlines()
        available = next(int(line.split()[1]) * 1024 for line in lines if line.startswith("MemAvailable:"))
    except (OSError, StopIteration, ValueError, IndexError):
        return None
    try:  # a container's limit is lower than the host's memory
        limit = Path("/sys/fs/cgroup/memory.max").read_text().strip()
        used = int(Path("/sys/fs/cgroup/memory.current").read_text())
        if limit != "max":
            available = min(available, int(limit) - used)
    except (OSError, ValueError):
        pass
    return available


def reset_peak(device: torch.device) -> None:
    """Start a command's peak from what is allocated now."""
    if device.type == "cuda" and torch.cuda.is_available():
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)


def peak_bytes(device: torch.device) -> int | None:
    """The most device memory tensors held since reset_peak (torch.cuda.max_memory_allocated); None on
    the CPU, where no allocator keeps that count."""
    if device.type == "cuda" and torch.cuda.is_available():
        torch.cuda.synchronize(device)
        return torch.cuda.max_memory_allocated(device)
    return None


def memory_record(peak: int | None, bound: MemoryBudget) -> dict:
    """The JSON a command reports: its peak, the stated bound and its parts, and whether it held."""
    return {
        "peak_bytes": peak,
        "bound_bytes": bound.total,
        "bound_parts_bytes": dict(bound.parts),
        "bound": bound.describe(),
        "within_bound": None if peak is None else peak <= bound.total,
    }


def memory_line(record: dict) -> str:
    """One line, the way vLLM says what model loading took: the peak, then the bound and its parts."""
    peak = record["peak_bytes"]
    said = "not tracked on the CPU" if peak is None else gib(peak)
    over = " [red]over the bound[/red]" if record["within_bound"] is False else ""
    return f"peak device memory {said}{over}; bound {gib(record['bound_bytes'])} = {record['bound']}"


def command_bound(
    session,
    graph_bytes: int,
    prompt_len: int,
    steps: int,
    fuse: bool,
    extra: dict | None = None,
    loading_peak: int | None = None,
) -> MemoryBudget:
    """The stated bound of a command on `session`: its measured weights, cache and graph pool (the
    graphs' recorded growth), the estimated activations of its largest bucket and the logits its checks
    keep, inductor's workspace when it compiled, `extra` parts (bench: compile's graphs, HF generate's
    own cache), the measured `loading_peak` where it is above all that, and the margin."""
    bound = MemoryBudget()
    bound.add("weights", weight_bytes(session.model))
    bound.add("KV cache", sum(layer.keys.nbytes + layer.values.nbytes for layer in session.kv.layers))
    bound.add("graph pool", graph_bytes)
    geometry = Geometry.of(session.model.config)
    dtype = session.model.dtype
    if geometry is not None:
        bound.add(
            "activations", activation_bytes(geometry, session.max_batch, session.max_cache_len, prompt_len, dtype)
        )
        bound.add("kept logits", kept_logits_bytes(geometry, session.max_batch, steps))
    else:  # no geometry to estimate from: a tenth of the weights
        bound.add("activations", bound.parts["weights"] // 10)
    batch, length = session.max_batch, session.max_cache_len
    bound.add("float32 reference", reference_bytes(session.model, geometry, batch, length, prompt_len))
    if fuse:
        bound.add("compile workspace", COMPILE_WORKSPACE)
    for name, nbytes in (extra or {}).items():
        bound.add(name, nbytes)
    if loading_peak is not None and loading_peak > bound.total:
        # loading comes before the session: a model quantized on load holds its bf16 layers until replaced
        bound.add("loading, above the rest", loading_peak - bound.total)
    bound.add("margin", margin(bound.total))
    return bound
