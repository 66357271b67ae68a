"""The plan file: what `capture` decided and measured, enough for `verify`/`bench` to re-capture.

CUDA graphs cannot leave the process that captured them, so a plan stores the recipe for the graphs
(model, dtype, device, buckets, regions), never the graphs.
"""

from __future__ import annotations

import datetime as _dt
import os
import re
from dataclasses import MISSING, asdict, dataclass, field, fields, replace
from pathlib import Path

import yaml

from accelerate_graph import settings as engine_settings
from accelerate_graph.common.atomic_io import atomic_write_text, check_writable, existing_kind
from accelerate_graph.common.devices import DTYPE_NAMES, resolve_device
from accelerate_graph.common.environment import environment_info, major_minor
from accelerate_graph.common.errors import BadOptionError, DeviceError, PlanError, first_line, option
from accelerate_graph.quant.fp8_format import WEIGHTS

PLAN_FORMAT = "cugraph-accel-plan/1"
DEFAULT_PLAN_PATH = Path("cugraph-accel.plan.yaml")
# What a plan runs: one graph per bucket, graph segments around eager islands, or no graph at all.
MODES = ("full", "piecewise", "eager")
ATTENTIONS = ("sdpa", "eager", "grouped")  # grouped: sdpa for the prompt, grouped-query decode attention
RECAPTURE = "Re-run `cugraph-accel capture`."


@dataclass
class Plan:
    model: str
    model_kind: str  # recipe | folder | hub
    model_type: str
    random_weights: bool
    dtype: str
    device: str
    attn: str
    mode: str  # full: one graph; piecewise: graph segments around eager islands; eager: no graphs
    buckets: list[int]
    max_cache_len: int
    prompt_len: int
    regions: list[dict]  # [{path, class, run: graph|eager, reason}]
    captures: list[dict]  # [{bucket, seconds, memory_bytes, context}]
    environment: dict
    revision: str | None = None
    backend: str = ""
    fixes: list = field(default_factory=list)  # what was changed to keep the step capturable, and why
    contexts: list = field(default_factory=list)  # context buckets (cache slots attention reads); [] = all
    fuse: bool = False  # the step was compiled by inductor before capture
    fingerprint: dict = field(default_factory=dict)  # models/fingerprint.py: who the model was at capture
    tp: int = 1  # tensor-parallel ranks (world size); device is rank 0's
    tp_layout: list = field(default_factory=list)  # per rank: device, heads, KV heads, weight bytes
    settings: dict = field(default_factory=dict)  # the engine settings it was captured under; {}: the defaults
    weights: str = "model"  # model, fp8 or fp8-block: the decoder's Linear layers in FP8 (quant/)
    created: str = field(default_factory=lambda: _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"))
    format: str = PLAN_FORMAT

    def __post_init__(self) -> None:
        for f in fields(self):
            value, kind = getattr(self, f.name), FIELD_TYPES[f.name]
            if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
                raise PlanError(f"plan key {f.name!r} has the wrong type ({type(value).__name__}).")
        checks = (  # in this order: a field is checked before any check that reads it
            (self.mode in MODES, f"mode {self.mode!r} is not one of {', '.join(MODES)}"),
            (
                self.dtype in DTYPE_NAMES.values(),
                f"dtype {self.dtype!r} is not one of {', '.join(DTYPE_NAMES.values())}",
            ),
            (
                re.fullmatch(r"cpu|cuda:[0-9]{1,3}", self.device, flags=re.ASCII),
                f"device {self.device!r} is not a device",
            ),
            (self.attn in ATTENTIONS, f"attn {self.attn!r} is not one of {', '.join(ATTENTIONS)}"),
            (self.max_cache_len >= 2, f"max_cache_len {self.max_cache_len} must be at least 2"),
            (
                1 <= self.prompt_len < self.max_cache_len,
                f"prompt_len {self.prompt_len} must be at least 1 and below max_cache_len",
            ),
            (
                self.buckets and all(type(b) is int and b >= 1 for b in self.buckets),
                "buckets must be whole numbers >= 1",
            ),
            (len(set(self.buckets)) == len(self.buckets), f"buckets {self.buckets} list a bucket twice"),
            (
                all(type(c) is int and 1 <= c <= self.max_cache_len for c in self.contexts),
                "contexts must be whole numbers from 1 to max_cache_len",
            ),
            (len(set(self.contexts)) == len(self.contexts), f"contexts {self.contexts} list a context twice"),
            (all(_is_region(r) for r in self.regions), "regions must each have a path, a class, run and reason"),
            (self.tp >= 1 and len(self.tp_layout) in (0, self.tp), "tp must be at least 1, with one layout per rank"),
            (self.weights in WEIGHTS, f"weights {self.weights!r} is not one of {', '.join(WEIGHTS)}"),
        )
        for ok, problem in checks:
            if not ok:
                raise PlanError(f"the plan's {problem}.", RECAPTURE)
        try:
            engine_settings.from_recorded(self.settings, "the plan")
        except BadOptionError as err:
            raise PlanError(err.message, RECAPTURE) from None


def _is_region(region) -> bool:
    return (
        isinstance(region, dict)
        and {"path", "class", "run", "reason"} <= set(region)
        and isinstance(region["path"], str)
        and region["run"] in ("graph", "eager")
    )


FIELD_TYPES = {
    "model": str, "model_kind": str, "model_type": str, "random_weights": bool, "dtype": str, "device": str,
    "attn": str, "mode": str, "buckets": list, "max_cache_len": int, "prompt_len": int, "regions": list,
    "captures": list, "environment": dict, "revision": (str, type(None)), "backend": str, "created": str,
    "format": str, "fixes": list, "contexts": list, "fuse": bool, "fingerprint": dict, "tp": int,
    "tp_layout": list, "settings": dict, "weights": str,
}  # fmt: skip


class _UniqueKeyLoader(yaml.SafeLoader):
    """safe_load that refuses a key given twice (plain YAML keeps the last one, silently)."""


def _construct_unique_mapping(loader: _UniqueKeyLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    seen: set = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=True)
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r} (line {key_node.start_mark.line + 1})", key_node.start_mark
            )
        seen.add(key)
    return loader.construct_mapping(node, deep)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_unique_mapping)


def _is_model_path(plan: Plan) -> bool:
    """A folder, or a recipe given as a .yaml file: both are paths, not names."""
    return plan.model_kind == "folder" or (plan.model_kind == "recipe" and plan.model.endswith((".yaml", ".yml")))


def _model_relative_to(plan: Plan, folder: Path) -> Plan:
    """The plan with a relative model path rewritten relative to `folder` (the plan's own), so the plan
    can be used from any working directory."""
    if not _is_model_path(plan) or os.path.isabs(os.path.expanduser(plan.model)):
        return plan
    return replace(plan, model=os.path.relpath(os.path.abspath(plan.model), os.path.abspath(folder)))


def _model_resolved_from(plan: Plan, folder: Path) -> Plan:
    """The inverse: a relative model path in a plan is read against the plan's folder."""
    if not _is_model_path(plan) or os.path.isabs(os.path.expanduser(plan.model)):
        return plan
    resolved = os.path.normpath(os.path.join(folder, plan.model))
    if not os.path.isabs(resolved) and not resolved.startswith("."):
        resolved = f".{os.sep}{resolved}"  # still a path to the loader, not a hub id
    return replace(plan, model=resolved)


def planned_model(path: Path) -> str:
    """The model an existing plan file names, read without validating the rest (for the line that
    refuses to replace it); "an unreadable model" when it does not say."""
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return "an unreadable model"
    model = data.get("model") if isinstance(data, dict) else None
    return repr(model) if isinstance(model, str) else "an unreadable model"


def check_plan_target(path: Path | str, force: bool) -> None:
    """`capture` may write its plan to `path`: never over an existing plan without `force` (the line names
    that plan's model), nor over a recipe or model file; and the folder takes a new file."""
    path = Path(path)
    if not force and existing_kind(path) == "plan":
        raise BadOptionError(
            f"{path} already holds a plan for {planned_model(path)}; capture does not replace it.",
            "Pass {force=True} to replace it, or choose another {plan=PATH}.",
        )
    check_writable(path, "plan", force)


def write_plan(plan: Plan, path: Path | str) -> None:
    header = "# Written by cugraph-accel capture. `cugraph-accel verify` / `bench` re-capture from it.\n"
    plan = _model_relative_to(plan, Path(path).parent)
    atomic_write_text(path, header + yaml.safe_dump(asdict(plan), sort_keys=False))


def read_plan(path: Path | str) -> Plan:
    path = Path(path)
    if not path.exists():
        raise PlanError(
            f"no plan file at {path}.", "Run `cugraph-accel capture MODEL` first, or pass MODEL or {plan=PATH}."
        )
    try:
        data = yaml.load(path.read_text(encoding="utf-8"), Loader=_UniqueKeyLoader)  # noqa: S506 - a SafeLoader
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as err:
        raise PlanError(
            f"plan file {path} cannot be read: {first_line(err)}.", "Re-run `cugraph-accel capture`."
        ) from err
    if not isinstance(data, dict) or data.get("format") != PLAN_FORMAT:
        raise PlanError(
            f"{path} is not a cugraph-accel plan (format {PLAN_FORMAT}).", "Re-run `cugraph-accel capture`."
        )
    known = {f.name for f in fields(Plan)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise PlanError(f"plan file {path} has an unknown key {unknown[0]!r}.", "Re-run `cugraph-accel capture`.")
    required = [f.name for f in fields(Plan) if f.default is MISSING and f.default_factory is MISSING]
    missing = sorted(name for name in required if name not in data)
    if missing:
        raise PlanError(f"plan file {path} lacks the key {missing[0]!r}.", "Re-run `cugraph-accel capture`.")
    try:
        plan = Plan(**data)
    except PlanError as err:
        raise PlanError(f"plan file {path}: {err.message}", err.hint) from None
    except TypeError as err:
        raise PlanError(f"plan file {path} is malformed: {err}.", "Re-run `cugraph-accel capture`.") from err
    _check_model_type(plan, path)
    return _model_resolved_from(plan, path.parent)


def _check_model_type(plan: Plan, path: Path) -> None:
    from transformers import CONFIG_MAPPING

    if plan.model_type not in CONFIG_MAPPING:
        raise PlanError(
            f"plan file {path}: model_type {plan.model_type!r} is not a model type transformers knows.",
            "Re-run `cugraph-accel capture`.",
        )


def check_plan_matches_model(plan: Plan, model, path: Path | str) -> None:
    """After loading the plan's model: its type is the plan's, and every region names one of its modules."""
    actual = str(model.config.model_type)
    if actual != plan.model_type:
        raise PlanError(
            f"plan file {path} says model_type {plan.model_type!r}, but {plan.model} is {actual!r}.",
            "Re-run `cugraph-accel capture` for this model.",
        )
    for region in plan.regions:
        if region["path"]:
            try:
                model.get_submodule(region["path"])
            except AttributeError:
                raise PlanError(
                    f"plan file {path} has a region {region['path']!r}, which is no module of {plan.model}.",
                    "Re-run `cugraph-accel capture` for this model.",
                ) from None


def check_plan_compatible(plan: Plan, device_override: str | None = None) -> None:
    """The plan's device must exist here, and graphs re-captured under another torch/transformers
    could differ from what was verified."""
    wanted = device_override or plan.device
    try:
        device = resolve_device(wanted)
    except DeviceError as err:
        raise PlanError(
            f"the plan targets {wanted}, which this machine cannot use: {err.message}",
            "Capture a plan on this machine: `cugraph-accel capture MODEL`.",
        ) from None
    here = environment_info(device)
    for package in ("torch", "transformers"):
        then = str(plan.environment.get(package, "?"))
        if major_minor(then) != major_minor(here[package]):
            raise PlanError(
                f"the plan was written with {package} {then}, this is {package} {here[package]}.",
                "Re-run `cugraph-accel capture` in this environment.",
            )


def check_plan_weights(plan: Plan, path: Path | str, asked: str | None) -> None:
    """A plan replays the weights it was captured with: another --weights is refused, not swapped in."""
    if asked is not None and asked != plan.weights:
        raise BadOptionError(
            f"the plan {path} was captured with {option('weights', plan.weights)}, not {option('weights', asked)}.",
            f"Drop {option('weights')} to replay the plan's, or capture a plan with {option('weights', asked)}.",
        )
