"""How one case is judged: replay's error against a float32 reference may not exceed eager's own error
against it by more than a factor, plus a small floor (docs/VERIFY.md has the reasoning and numbers).

Everything here works on tensors: logits [steps, rows, vocab] of the replay, eager and reference runs,
and the K/V each wrote, per layer [rows, heads, slots, dim]. Each measure is taken per row and step
(per row and layer for the cache), never only on one worst element:
- relative L2 error of the logits (catches a fault in any one row or step);
- KL divergence of the next-token distribution, reference || run (what sampling sees);
- systematic drift: the part of the error that is a scale or a shift of the reference logits, in units
  of their spread (rounding noise has almost none; a logit scaled by 1.04 has 0.04);
- greedy top-1 agreement with the reference, and flips across a margin wider than the noise.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from accelerate_graph.verify.finite import GraphAt, replay_failures, require_finite
from accelerate_graph.verify.routers import RouterReport


@dataclass(frozen=True)
class Tolerance:
    """Replay may be `factor` times further from the reference than eager is (squared for KL, which
    grows with the square of a logit error), plus a floor: in float32, where eager is the reference
    (error 0), a fixed one; in a low precision, `floor_roundings` x the error one rounding to the dtype
    makes in the reference's own values (per layer and row of the cache). The logits keep a fixed floor:
    fused kernels that round scores or partial sums to the dtype elsewhere than eager does move bf16 logits
    by up to ~3x eager's error on trained weights (a calibrated logit floor failed them)."""

    factor: float
    l2_floor: float  # relative L2 error of each cache layer: the fixed part of the floor
    logit_l2_floor: float  # relative L2 error of the logits: a fixed floor
    kl_floor: float  # mean KL, nats
    drift_floor: float  # scale or shift of the logits, in units of their spread
    top1_floor: float = 0.02  # share of row-steps whose greedy token may differ beyond eager's count
    floor_roundings: float = 0.0  # the calibrated part of the L2 floor, in roundings of the values


# One more rounding of every value than eager makes: a replay that rounds each output once more is at most
# eager's error + that rounding (triangle inequality) and passes; noise beyond eager's own error does not.
FLOOR_ROUNDINGS = 1.0

# bf16 keeps 8 significant bits (unit roundoff 2**-9 ~ 2e-3): a 1% drift is several ulps. float16 keeps
# 11 bits, float32 24 (its floor covers other summation orders of a padded batch or another kernel).
TOLERANCES = {
    torch.bfloat16: Tolerance(
        factor=2.0,
        l2_floor=0.0,
        logit_l2_floor=1e-2,
        kl_floor=1e-4,
        drift_floor=1e-2,
        floor_roundings=FLOOR_ROUNDINGS,
    ),
    torch.float16: Tolerance(
        factor=2.0,
        l2_floor=0.0,
        logit_l2_floor=2e-3,
        kl_floor=1e-5,
        drift_floor=2e-3,
        floor_roundings=FLOOR_ROUNDINGS,
    ),
    torch.float32: Tolerance(factor=2.0, l2_floor=1e-4, logit_l2_floor=1e-4, kl_floor=1e-8, drift_floor=1e-4),
}
FLIP_SIGMAS = 4.0  # greedy flips allowed beyond those expected from the noise, in standard deviations
FLIP_CANDIDATES = 256  # tokens per row-step that can take the top: the reference's closest ones
# A router flip swaps one expert's share of a row's hidden state, which the final norm rescales: the error
# that leaves along the reference's own logits is at most 1/sqrt(2) of it (cosine), less the smaller the
# swap. A row-step whose error is more aligned than SCALE_ALIGNED is a scale of the logits, never excused.
SCALE_ALIGNED = 0.8
NOISE_SIGMAS = 3.0  # a top-1 flip is a near-tie when the reference's top-2 gap is within this many
# standard deviations of the difference of two logits of eager's error (sqrt(2) * its rms)


def tolerance_for(dtype: torch.dtype) -> Tolerance:
    return TOLERANCES.get(dtype, TOLERANCES[torch.float32])


def rounding_error(values: list[torch.Tensor], dtype: torch.dtype, dims) -> torch.Tensor:
    """The relative L2 error that rounding `values` once to `dtype` makes, expected, reduced over `dims`
    of each tensor (and summed over the tensors): each value moves by a uniform share of its spacing,
    rms spacing / sqrt(12). Computed from the values, so a bf16 tensor (already rounded) has it too."""
    eps = torch.finfo(dtype).eps
    moved, size = 0.0, 0.0
    for tensor in values:
        x = tensor.double()
        spacing = torch.ldexp(torch.full_like(x, eps), torch.frexp(x).exponent - 1)  # |x| in [2**(e-1), 2**e)
        spacing = spacing.masked_fill(x == 0, 0.0)  # a zero stays zero
        moved = moved + spacing.pow(2).sum(dims) / 12
        size = size + x.pow(2).sum(dims)
    return (torch.as_tensor(moved).sqrt() / torch.as_tensor(size).sqrt().clamp_min(1e-30)).float()


def l2_floor(tol: Tolerance, values: list[torch.Tensor], dtype: torch.dtype, dims) -> torch.Tensor:
    """The floor of each entry's relative L2 bound: the fixed part plus floor_roundings roundings."""
    if not tol.floor_roundings:
        return torch.tensor(tol.l2_floor, device=values[0].device if values else None)
    return tol.l2_floor + tol.floor_roundings * rounding_error(values, dtype, dims)


@dataclass
class LogitMeasures:
    """Per row-step measures of one run against the reference, each [steps, rows]."""

    rel_l2: torch.Tensor
    kl: torch.Tensor
    scale: torch.Tensor  # least-squares scale of the error onto the centred reference logits
    aligned: torch.Tensor  # |cosine| of the centred error and the centred reference logits
    shift: torch.Tensor  # mean error over the vocabulary, in units of the reference's spread
    rms: torch.Tensor  # rms error of one logit
    top1: torch.Tensor  # bool: the run's greedy token is the reference's


def logit_measures(run: torch.Tensor, reference: torch.Tensor) -> LogitMeasures:
    run, reference = run.double(), reference.double()
    err = run - reference
    centred = reference - reference.mean(-1, keepdim=True)
    spread = centred.pow(2).mean(-1).sqrt().clamp_min(1e-30)
    err_centred = err - err.mean(-1, keepdim=True)
    along, centred_sq = (err_centred * centred).sum(-1), centred.pow(2).sum(-1)  # [steps, rows] each
    log_ref, log_run = reference.log_softmax(-1), run.log_softmax(-1)
    return LogitMeasures(
        rel_l2=(err.norm(dim=-1) / reference.norm(dim=-1).clamp_min(1e-30)).float(),
        kl=(log_ref.exp() * (log_ref - log_run)).sum(-1).clamp_min(0).float(),
        scale=(along / centred_sq.clamp_min(1e-30)).float(),
        aligned=(along.abs() / (err_centred.norm(dim=-1) * centred_sq.sqrt()).clamp_min(1e-30)).float(),
        shift=(err.mean(-1) / spread).float(),
        rms=err.pow(2).mean(-1).sqrt().float(),
        top1=run.argmax(-1) == reference.argmax(-1),
    )


def drift(measures: LogitMeasures, excused: torch.Tensor | None = None) -> float:
    """The systematic part of the error over a case: mean scale and mean shift (rounding noise averages
    out over rows and steps, a systematic fault does not)."""
    keep = ~excused if excused is not None else torch.ones_like(measures.top1)
    if not keep.any():
        return 0.0
    return max(abs(measures.scale[keep].mean().item()), abs(measures.shift[keep].mean().item()))


def clear_flips(run: torch.Tensor, reference: torch.Tensor, eager: LogitMeasures, factor: float = 1.0) -> torch.Tensor:
    """bool [steps, rows]: the run's greedy token differs from the reference's although the reference's
    margin between the two is wider than `factor` x eager's noise could bridge (replay is allowed
    `factor` x eager's error, so its flips are judged against that much noise)."""
    ref_top = reference.argmax(-1, keepdim=True)
    run_top = run.argmax(-1, keepdim=True)
    gap = (reference.gather(-1, ref_top) - reference.gather(-1, run_top)).squeeze(-1)
    noise = factor * NOISE_SIGMAS * math.sqrt(2) * eager.rms
    return (run_top.squeeze(-1) != ref_top.squeeze(-1)) & (gap > noise)


def expected_flips(reference: torch.Tensor, noise_rms: torch.Tensor) -> tuple[float, float]:
    """Mean and variance of the number of row-steps whose greedy token changes when every logit gets
    independent noise of `noise_rms` ([steps, rows]): token j overtakes the top with probability
    Phi(-gap_j / (sqrt(2) rms)), summed over the closest candidates (a union bound, so an over-estimate).
    Near-ties make flips likely (random weights have many), clear margins make them rare."""
    k = min(FLIP_CANDIDATES, reference.shape[-1])
    top = reference.topk(k, dim=-1).values.double()  # the closest k only: no double copy of the vocabulary
    gaps = top[..., :1] - top[..., 1:]
    spread = math.sqrt(2) * noise_rms.double().clamp_min(1e-30).unsqueeze(-1)
    p = (0.5 * torch.special.erfc(gaps / spread / math.sqrt(2))).sum(-1).clamp(0, 1)
    return p.sum().item(), (p * (1 - p)).sum().item()


def row_bound(errors: torch.Tensor, tol: Tolerance, floor: torch.Tensor, median_dim: int | None = None) -> torch.Tensor:
    """The largest error replay may have per entry: factor x eager's error of the same entry (or the
    case's median eager error, if larger: one entry's eager error is a single draw) + floor (per entry).
    With `median_dim`, the median is taken along that dimension only (each layer's rows, for the cache)."""
    if not errors.numel():
        typical = torch.tensor(0.0)
    elif median_dim is None:
        typical = errors.median()
    else:
        typical = errors.median(dim=median_dim, keepdim=True).values
    return tol.factor * torch.maximum(errors, typical) + floor


@dataclass
class Judgement:
    """The verdict on one case, with the measures the table and JSON show."""

    passed: bool
    detail: str  # the first broken rule, in words
    logit_err: float  # worst relative L2 error of replay's logits, any row and step
    eager_err: float  # worst of eager's
    # worst replay error / eager's error of the same row-step (or eager's median, if larger; at least
    # floor / factor, so a reference equal to eager, error 0, gives a ratio to the floor, not 1e9)
    ratio: float
    kl: float  # mean KL(reference || replay)
    eager_kl: float
    drift: float  # systematic scale/shift of replay's logits
    top1: float  # share of row-steps whose greedy token is the reference's
    eager_top1: float
    cache_err: float  # worst relative L2 error of a cache layer's written K/V, any row
    eager_cache_err: float
    router_flips: int = 0  # replay row-steps (or cache rows) off by more than rounding: a router flip
    router_accepted: int = 0  # ... at a near-tie of the reference's routers
    router_rejected: int = 0
    eager_router_flips: int = 0  # eager's own decisions that differ from the reference's (counted exactly)
    eager_router_accepted: int = 0
    failures: list[str] = field(default_factory=list)


def _excused(over: torch.Tensor, routers: RouterReport | None) -> torch.Tensor:
    """Of the row-steps `over` their bound, those with a near-tie in the row at or before the step."""
    excused = torch.zeros_like(over)
    if routers is None:
        return excused
    for step, row in over.nonzero().tolist():
        excused[step, row] = routers.tie_in_row_before(row, step)
    return excused


def judge_logits(
    replay: torch.Tensor,
    eager: torch.Tensor,
    reference: torch.Tensor,
    tol: Tolerance,
    routers: RouterReport | None,
    dtype: torch.dtype = torch.float32,
) -> tuple[dict, list[str], torch.Tensor, torch.Tensor]:
    """Measures and broken rules of the logits [steps, rows, vocab]; also which row-steps broke their
    bound and which of those a router near-tie excuses."""
    r, e = logit_measures(replay, reference), logit_measures(eager, reference)
    floor = torch.tensor(tol.logit_l2_floor, device=e.rel_l2.device)
    bound = row_bound(e.rel_l2, tol, floor)
    # A row-step departs from the reference when its error leaves the bound or its greedy token flips
    # across a clear margin; in an MoE both are what one router decision that went the other way looks
    # like, so both get the same near-tie excuse (and the same cap, in _judge_router_rows).
    over_bound = r.rel_l2 > bound
    over = over_bound | clear_flips(replay, reference, e, tol.factor)
    excused = _excused(over, routers) & (r.aligned <= SCALE_ALIGNED)
    failures = []
    for step, row in (over_bound & ~excused).nonzero().tolist()[:1]:
        failures.append(
            f"logits of row {row} at step {step + 1}: relative L2 error {r.rel_l2[step, row]:.3g} against the "
            f"float32 reference, allowed {bound[step, row]:.3g} (eager's: {e.rel_l2[step, row]:.3g})"
        )
    keep = ~excused
    kl, eager_kl = r.kl[keep].mean().item() if keep.any() else 0.0, e.kl.mean().item()
    if kl > tol.factor**2 * eager_kl + tol.kl_floor:
        failures.append(f"mean KL {kl:.3g} nats against the reference, eager's {eager_kl:.3g}")
    drifted, eager_drift = drift(r, excused), drift(e)
    if drifted > tol.factor * eager_drift + tol.drift_floor:
        failures.append(
            f"every logit drifts: a systematic scale/shift of {drifted:.3g} of the logits' spread "
            f"(eager's {eager_drift:.3g}, allowed {tol.factor * eager_drift + tol.drift_floor:.3g})"
        )
    failures += _judge_top1(replay, eager, reference, r, e, keep, tol)
    measures = {
        "logit_err": r.rel_l2.max().item(),
        "eager_err": e.rel_l2.max().item(),
        "ratio": (
            r.rel_l2 / torch.maximum(torch.maximum(e.rel_l2, e.rel_l2.median()), floor / tol.factor).clamp_min(1e-30)
        )
        .max()
        .item(),
        "kl": kl,
        "eager_kl": eager_kl,
        "drift": drifted,
        "top1": r.top1.float().mean().item(),
        "eager_top1": e.top1.float().mean().item(),
    }
    return measures, failures, over, excused


def _judge_top1(replay, eager, reference, r: LogitMeasures, e: LogitMeasures, keep, tol: Tolerance) -> list[str]:
    """Greedy tokens: no more flips across a clear margin than eager has, and no more flips in all than
    flip_allowance."""
    failures = []
    clear = clear_flips(replay, reference, e, tol.factor) & keep
    eager_clear_count = int(clear_flips(eager, reference, e).sum())
    if int(clear.sum()) > eager_clear_count:
        step, row = clear.nonzero()[0].tolist()
        failures.append(
            f"greedy token of row {row} at step {step + 1} differs from the reference's across a margin "
            f"wider than the noise ({int(clear.sum())} such row-step(s))"
        )
    flips, eager_flips = int((~r.top1 & keep).sum()), int((~e.top1).sum())
    allowed = flip_allowance(reference, e, keep, eager_flips, tol)
    if flips > allowed:
        failures.append(
            f"{flips} greedy tokens differ from the reference's (eager: {eager_flips}, allowed {allowed:g})"
        )
    return failures


def flip_allowance(reference: torch.Tensor, e: LogitMeasures, keep: torch.Tensor, eager_flips: int, tol: Tolerance):
    """How many greedy tokens replay may get wrong: factor x eager's count plus a small share, or, if
    more, what noise of factor x eager's error flips at the reference's own margins plus FLIP_SIGMAS
    standard deviations. Eager's count alone is one small draw: with 8 row-steps at random-weight
    near-ties (a flip in ~1 of 10) eager flips none 43% of the time, and an equally good replay then
    flips two or more 19% of the time: false alarms in ~1 of 12 such cases."""
    counted = tol.factor * eager_flips + math.ceil(tol.top1_floor * keep.numel())
    return max(counted, beyond_noise(*expected_flips(reference[keep], tol.factor * e.rms[keep])))


def beyond_noise(mean: float, variance: float) -> int:
    """A count of flips that noise alone (this mean and variance) exceeds only rarely: FLIP_SIGMAS deviations up."""
    return math.ceil(mean + FLIP_SIGMAS * math.sqrt(variance))


def _layer_groups(cache: list) -> list[list[int]]:
    """The cache's layers grouped by the shapes of their K and V: each group is judged as one stacked tensor (a
    few kernels for the whole cache instead of a dozen a layer, which a GPU spends as much time launching)."""
    groups: dict[tuple, list[int]] = {}
    for layer, (keys, values) in enumerate(cache):
        groups.setdefault((keys.shape, values.shape), []).append(layer)
    return list(groups.values())


def _stacked(cache: list, layers: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """K and V of `layers`, stacked [layers, rows, heads, slots, dim], in float64."""
    return tuple(torch.stack([cache[layer][kind] for layer in layers]).double() for kind in (0, 1))


def _per_layer(cache: list, per_group) -> torch.Tensor:
    """[layers, rows]: `per_group(layers)` ([len(layers), rows]) put back in the cache's layer order."""
    order, parts = [], []
    for layers in _layer_groups(cache):
        order += layers
        parts.append(per_group(layers))
    stacked = torch.cat(parts)
    return stacked if order == sorted(order) else stacked[torch.tensor(order, device=stacked.device).argsort()]


def cache_errors(run: list, reference: list) -> torch.Tensor:
    """Relative L2 error [layers, rows] of the K and V each layer wrote ([rows, heads, slots, dim] each)."""
    if not reference:
        return torch.zeros(0, 0)

    def errors(layers: list[int]) -> torch.Tensor:
        (keys, values), (ref_keys, ref_values) = _stacked(run, layers), _stacked(reference, layers)
        dims = (2, 3, 4)
        diff = (keys - ref_keys).pow(2).sum(dims) + (values - ref_values).pow(2).sum(dims)
        size = ref_keys.pow(2).sum(dims) + ref_values.pow(2).sum(dims)
        return (diff.sqrt() / size.sqrt().clamp_min(1e-30)).float()

    return _per_layer(reference, errors)


def cache_floor(tol: Tolerance, reference: list, dtype: torch.dtype) -> torch.Tensor:
    """The floor [layers, rows] of each layer's and row's relative L2 bound (l2_floor over its K and V)."""

    def floor(layers: list[int]) -> torch.Tensor:
        stacked = _stacked(reference, layers)
        return l2_floor(tol, list(stacked), dtype, (2, 3, 4)).expand(len(layers), stacked[0].shape[1]).float()

    return _per_layer(reference, floor)


def judge_cache(
    replay: list,
    eager: list,
    reference: list,
    tol: Tolerance,
    routers: RouterReport | None,
    steps: int,
    dtype: torch.dtype = torch.float32,
) -> tuple[dict, list[str], torch.Tensor, torch.Tensor]:
    """Measures and broken rules of the written K/V per (layer, row); also which entries broke their
    bound and which of those a router near-tie upstream excuses."""
    r, e = cache_errors(replay, reference), cache_errors(eager, reference)
    if not r.numel():
        empty = torch.zeros(0, 0, dtype=torch.bool)
        return {"cache_err": 0.0, "eager_cache_err": 0.0}, [], empty, empty
    # each layer's median: eager's error grows with depth, so another layer's would loosen an early one
    bound = row_bound(e, tol, cache_floor(tol, reference, dtype), median_dim=1)
    over = r > bound
    excused = torch.zeros_like(over)
    if routers is not None:
        for layer, row in over.nonzero().tolist():
            excused[layer, row] = routers.tie_in_row_before(row, steps - 1, layer)
    failures = [
        f"cache layer {layer} row {row}: relative L2 error {r[layer, row]:.3g} of the K/V it wrote against the "
        f"float32 reference, allowed {bound[layer, row]:.3g} (eager's: {e[layer, row]:.3g})"
        for layer, row in (over & ~excused).nonzero().tolist()[:1]
    ]
    return {"cache_err": r.max().item(), "eager_cache_err": e.max().item()}, failures, over, excused


def judge_tensors(
    logits: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
    caches: tuple[list, list, list],
    dtype: torch.dtype,
    routers: RouterReport | None = None,
    graph_at: GraphAt | None = None,
) -> Judgement:
    """(replay, eager, reference) logits [steps, rows, vocab] and written K/V per layer: the verdict.
    Non-finite values come first (verify/finite.py): in eager or the reference they raise, in the replay
    they fail the case on their own (every rule below compares with `>`, which NaN passes)."""
    require_finite("the float32 reference", logits[2], caches[2], graph_at)
    require_finite("eager", logits[1], caches[1], graph_at)
    non_finite = replay_failures(logits[0], logits[2], caches[0], caches[2], graph_at)
    if non_finite:
        return _non_finite_judgement(non_finite, logits[1], logits[2], caches[1], caches[2])
    tol = tolerance_for(dtype)
    steps = logits[0].shape[0]
    measures, failures, over_logits, excused_logits = judge_logits(*logits, tol, routers, dtype)
    cache_measures, cache_failures, over_cache, excused_cache = judge_cache(*caches, tol, routers, steps, dtype)
    failures += cache_failures
    judgement = Judgement(not failures, "; ".join(failures[:2]), **measures, **cache_measures, failures=failures)
    if routers is not None:
        _count_router_rows(judgement, over_logits, excused_logits, over_cache, excused_cache)
        judgement.eager_router_flips = routers.eager_flips
        judgement.eager_router_accepted = routers.eager_flips_accepted
        _judge_router_rows(judgement, routers, tol)
    return judgement


def _non_finite_judgement(failures: list[str], eager, reference, eager_cache, reference_cache) -> Judgement:
    """A failed verdict for a replay with NaN/Inf: its own measures are NaN (no number describes it),
    eager's are as measured."""
    e, nan = logit_measures(eager, reference), float("nan")
    eager_cache_err = cache_errors(eager_cache, reference_cache)
    return Judgement(
        passed=False,
        detail="; ".join(failures[:2]),
        logit_err=nan,
        eager_err=e.rel_l2.max().item(),
        ratio=nan,
        kl=nan,
        eager_kl=e.kl.mean().item(),
        drift=nan,
        top1=nan,
        eager_top1=e.top1.float().mean().item(),
        cache_err=nan,
        eager_cache_err=eager_cache_err.max().item() if eager_cache_err.numel() else 0.0,
        failures=failures,
    )


def router_row_allowance(routers: RouterReport, tol: Tolerance) -> int:
    """How many rows near-ties may excuse: factor x the rows in which eager itself flipped a router, plus one,
    or, if more, the rows that noise of the replay's allowed size would flip at the reference's own margins
    plus FLIP_SIGMAS standard deviations. Eager's count alone is one small draw: on trained routers eager
    flipped none while an equally good fused replay flipped two rows of eight."""
    return max(int(tol.factor * routers.eager_flip_rows) + 1, beyond_noise(*routers.expected_flip_rows()))


def _judge_router_rows(judgement: Judgement, routers: RouterReport, tol: Tolerance) -> None:
    """Near-ties excuse a row only as often as eager's noise would flip a router: a fault that sends every
    row off its bound cannot hide behind near-ties, which random-weight routers have in most rows."""
    allowed = router_row_allowance(routers, tol)
    if judgement.router_accepted > allowed:
        judgement.failures.append(
            f"{judgement.router_accepted} rows left their bound at router near-ties; eager's routers flipped "
            f"in {routers.eager_flip_rows} row(s) (allowed {allowed:g})"
        )
        judgement.passed = False
        judgement.detail = "; ".join(judgement.failures[:2])


def _count_router_rows(judgement: Judgement, over_logits, excused_logits, over_cache, excused_cache) -> None:
    """Rows whose replay left its bound somewhere (a router decision that went the other way, as far as
    a replay shows it: its own decisions cannot be read); accepted where every departure has a near-tie
    upstream."""
    off = over_logits.any(0)
    unexcused = (over_logits & ~excused_logits).any(0)
    if over_cache.numel():
        off |= over_cache.any(0)
        unexcused |= (over_cache & ~excused_cache).any(0)
    judgement.router_flips = int(off.sum())
    judgement.router_rejected = int((off & unexcused).sum())
    judgement.router_accepted = judgement.router_flips - judgement.router_rejected


CRITERION_LINE = "each error <= 2 x eager's + a floor"


def criterion_summary() -> dict:
    """The rule and its numbers per dtype, for JSON output."""
    return {
        "rule": "replay error vs float32 reference <= factor x eager error vs reference + floor",
        "floor": "l2_floor + floor_roundings x the relative error one rounding to the dtype makes in the reference",
        "tolerances": {str(dtype).removeprefix("torch."): vars(tol) for dtype, tol in TOLERANCES.items()},
        "noise_sigmas": NOISE_SIGMAS,
    }
