"""Every switch of the engine, declared once, resolved once per command into a frozen `Settings` value.

A command resolves its settings (defaults, then a plan's recorded settings, then the environment's
`CUGRAPH_ACCEL_<NAME>` variables, then `--set NAME=VALUE`) and passes the value down: request -> session ->
fused forward. The fused forward runs its compiles and captures under `use(settings)`, and the kernels'
launch code reads `current()`: a triton op's wrapper has no other way in, and reading one frozen value keeps
dynamo's guard on it cheap. This module is the only place that reads the environment for a setting.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from accelerate_graph.common.errors import SETTING, BadOptionError, option

ASSIGNMENTS = "assignments"  # the keyword of resolve() that `--set NAME=VALUE` fills (cli/errors.py FLAGS)

ENV_PREFIX = "CUGRAPH_ACCEL_"
# Process variables of the multi-GPU launcher and of the test suite, not settings: never reported unknown.
PROCESS_VARIABLES = frozenset({"TP_WORKER", "DIST_TIMEOUT", "REALSIZE", "FULL_ZOO"})
# Set in every tensor-parallel rank (the command runs its body, not the launcher); named here, where the
# CLI can read it without importing torch.
TP_WORKER_ENV = ENV_PREFIX + "TP_WORKER"
# Earlier names of settings, named in the error a stale variable gets.
RENAMED = {"skinny_b1": "skinny_batch_1", "tune": "inductor_tuning", "skinny_pdl": "pdl"}

AUTO_ON_OFF = ("auto", "on", "off")
SKINNY_OPS = ("proj", "residual", "gate_up")


def _bool(text: str) -> bool:
    value = text.strip().lower()
    if value in ("1", "on", "true", "yes"):
        return True
    if value in ("0", "off", "false", "no"):
        return False
    raise ValueError("on or off")


def _choice(*choices: str) -> Callable[[str], str]:
    aliases = {"1": "on", "0": "off"} if "on" in choices else {}

    def parse(text: str) -> str:
        value = aliases.get(text.strip().lower(), text.strip().lower())
        if value not in choices:
            raise ValueError(f"{', '.join(choices[:-1])} or {choices[-1]}")
        return value

    return parse


def _carveout(text: str) -> str:
    value = text.strip().lower()
    if value in ("auto", "off") or (value.isdigit() and int(value) <= 100):
        return value
    raise ValueError("auto, off or a percent from 0 to 100")


def _power_of_two_or_zero(text: str) -> int:
    value = text.strip()
    if not value.isdigit() or int(value) & (int(value) - 1):
        raise ValueError("0 or a power of two")
    return int(value)


def _positive(text: str) -> int:
    value = text.strip()
    if not value.isdigit() or int(value) < 1:
        raise ValueError("a whole number from 1")
    return int(value)


def _skinny_ops(text: str) -> str:
    value = text.strip().lower().replace(" ", "")
    if value in ("auto", "off", "on", "0", "1", ""):
        return {"0": "off", "1": "on", "": "off"}.get(value, value)
    named = value.split(",")
    unknown = [name for name in named if name not in SKINNY_OPS]
    if unknown:
        raise ValueError(f"auto, on, off or a comma list of {', '.join(SKINNY_OPS)}")
    return ",".join(op for op in SKINNY_OPS if op in named)


@dataclasses.dataclass(frozen=True)
class Setting:
    """One switch: its name (a field of Settings), its parser from text, its default and why it exists."""

    name: str
    parse: Callable[[str], Any]
    default: Any
    allowed: str
    why: str

    @property
    def env(self) -> str:
        return ENV_PREFIX + self.name.upper()


REGISTRY: tuple[Setting, ...] = (
    Setting("pdl", _bool, True, "on, off",
            "each kernel launches while the one before ends (Hopper): the 1B's batch 1 0.961 -> 0.902 ms (H200)"),
    Setting("smem_carveout", _carveout, "auto", "auto, off, 0-100",
            "one shared-memory split above batch 1, so PDL's launches overlap: Qwen's batch 16 1.093 -> 0.842 ms"),
    Setting("triton_attention", _bool, True, "on, off",
            "our decode attention kernel in place of sdpa's matmuls: Qwen's batch 1 0.883 -> 0.797 ms (H200)"),
    Setting("attention_preloaded", _power_of_two_or_zero, 4, "0 or a power of two",
            "parts of the head dim of the one-kernel attention of short contexts (0: off): the 1B -19 us, Qwen -21"),
    Setting("attention_preloaded_batch", _positive, 1, "1 or more",
            "the largest batch of the one-kernel attention: it rereads K per query head, batch 4 +25 to +65 us"),
    Setting("attention_splits", _choice("length", "fixed"), "length", "length, fixed",
            "the attention's context splits by batch and length as it runs (length), or fixed per batch class: the "
            "8B's batch 4 over 3,000 tokens 8.00 -> 6.77 ms, batch 32 over 128 6.62 -> 6.48 (H100)"),
    Setting("skinny_batch_1", _choice(*AUTO_ON_OFF), "auto", "auto, on, off",
            "our skinny matmuls at batch 1 (auto: the tuning table's shapes): the 1B 1.040 -> 0.962 ms (H200)"),
    Setting("skinny_batches", _skinny_ops, "auto", "auto, on, off, or ops: proj,residual,gate_up",
            "our skinny matmuls above batch 1 (auto: the shapes and rows that won): Qwen's batch 8 -107 us"),
    Setting("lm_head_kernel", _choice(*AUTO_ON_OFF), "auto", "auto, on, off",
            "our skinny kernel for the LM head (auto: the head shapes that won): the 1B's batch 1 -7 to -9 us"),
    Setting("fp8_fold", _choice(*AUTO_ON_OFF), "auto", "auto, on, off",
            "FP8 layers' norms and residual adds in the FP8 kernel (auto: on CUDA), not kernels apart; unmeasured"),
    Setting("final_norm_kernel", _bool, True, "on, off",
            "the final norm as one kernel launched with PDL (7 kernels fewer): the 1B -14 us, Qwen -11 us a step"),
    Setting("rotary_table", _bool, True, "on, off",
            "cos/sin gathered from a table filled once, one kernel instead of ~9: the 1B 0.887 -> 0.871 ms"),
    Setting("mask_kernel", _bool, True, "on, off",
            "the decode step's attention mask as one kernel (12 fewer): batch 1 -15 us (the 1B), -16 us (Qwen)"),
    Setting("gemv_materialize", _bool, True, "on, off",
            "inductor's GEMV reads its input stored, not recomputed per row: the 8B's tp 2 down 1,389 -> 502 us"),
    Setting("inductor_tuning", _choice(*AUTO_ON_OFF), "auto", "auto, on, off",
            "inductor's coordinate-descent tuning (auto: from hidden 2,048): the 8B 4.662 -> 4.280 ms, Qwen slower"),
    Setting("allreduce", _choice("auto", "nccl", "oneshot"), "auto", "auto, nccl, oneshot",
            "tensor-parallel all-reduce (auto: one-shot where peers map): the 8B tp 2 batch 1 4.69 -> 4.34 ms"),
    Setting("prefill_graphs", _bool, True, "on, off",
            "serve's first prompt parts as captured graphs (rows x width shapes), not an eager forward's host time "
            "(~50 ms a prefill at the 8B; 36 ms a prefill of ~9 prompts with them, H100)"),
    Setting("debug", _bool, False, "on, off",
            "tracebacks and buffer checks before every replay; off: each check waits for the device's cache slot"),
)  # fmt: skip

BY_NAME: dict[str, Setting] = {setting.name: setting for setting in REGISTRY}
# Not recorded in a plan nor compared with one: they do not change what a graph computes or how fast.
UNRECORDED = frozenset({"debug"})


def _parse(setting: Setting, text: str, source: str) -> Any:
    try:
        return setting.parse(str(text))
    except ValueError as err:
        raise BadOptionError(
            f"{source} sets {setting.name} to {text!r}, which is not {err}.",
            f"Use one of: {setting.allowed} (see `cugraph-accel settings`).",
        ) from None


def _field_type(setting: Setting) -> type:
    return type(setting.default)


Settings = dataclasses.make_dataclass(
    "Settings",
    [(s.name, _field_type(s), dataclasses.field(default=s.default)) for s in REGISTRY],
    frozen=True,
    namespace={
        "__doc__": "The resolved value of every setting of REGISTRY (a frozen value; `replace` makes another).",
        "as_dict": lambda self: dataclasses.asdict(self),
        "recorded": lambda self: {k: v for k, v in dataclasses.asdict(self).items() if k not in UNRECORDED},
        "differing": lambda self: {
            k: v for k, v in dataclasses.asdict(self).items() if v != BY_NAME[k].default and k not in UNRECORDED
        },
        "replace": lambda self, **changes: dataclasses.replace(self, **changes),
    },
)

DEFAULTS = Settings()


def unknown_name(name: str, source: str) -> BadOptionError:
    if name.lower() in RENAMED:
        new = BY_NAME[RENAMED[name.lower()]]
        return BadOptionError(
            f"{source} names {name!r}, a setting since renamed {new.name!r}.",
            f"Use {new.env} or {option(SETTING + new.name)}.",
        )
    return BadOptionError(
        f"{source} names no setting {name!r}.",
        f"Settings: {', '.join(BY_NAME)} (see `cugraph-accel settings`).",
    )


def _key(name: str) -> str:
    return name.strip().lower().replace("-", "_")


def from_text(values: Mapping[str, str], source: str, base: Any = DEFAULTS) -> Any:
    """`base` with the named settings parsed from text; an unknown name or a bad value is one clear error."""
    changes = {}
    for name, text in values.items():
        key = _key(name)
        if key not in BY_NAME:
            raise unknown_name(name, source)
        changes[key] = _parse(BY_NAME[key], text, source)
    return dataclasses.replace(base, **changes)


def from_recorded(values: Mapping[str, Any], source: str, base: Any = DEFAULTS) -> Any:
    """Settings as a plan recorded them (typed values); an unknown name is an error naming it."""
    return from_text({name: as_text(value) for name, value in values.items()}, source, base)


def as_text(value: Any) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    return str(value)


def from_environment(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The settings the environment sets, as text by setting name; an unknown CUGRAPH_ACCEL_ name is an
    error, so a typo never passes silently."""
    environ = os.environ if environ is None else environ
    found = {}
    for key, text in environ.items():
        if not key.startswith(ENV_PREFIX):
            continue
        name = key[len(ENV_PREFIX) :]
        if name in PROCESS_VARIABLES:
            continue
        if name.lower() not in BY_NAME:
            raise unknown_name(name.lower(), f"The environment variable {key}")
        found[name.lower()] = text
    return found


def environment_flag(name: str, environ: Mapping[str, str] | None = None) -> bool:
    """An on/off setting as the environment sets it, False where it is unset or not on/off: for what must
    work before (or while) a command resolves its settings, such as showing a traceback."""
    environ = os.environ if environ is None else environ
    try:
        return bool(BY_NAME[name].parse(environ.get(BY_NAME[name].env, "off") or "off"))
    except ValueError:
        return False


def parse_assignments(assignments: list[str] | tuple[str, ...]) -> dict[str, str]:
    """`--set NAME=VALUE` options as text by name."""
    out = {}
    for item in assignments:
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise BadOptionError(
                f"{option(ASSIGNMENTS)} {item!r} is not NAME=VALUE.",
                f"Write it as {option(SETTING + 'pdl', False)}, say.",
            )
        out[name.strip()] = value
    return out


def resolve(
    assignments: Mapping[str, str] | None = None,
    recorded: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
) -> Any:
    """Defaults, then a plan's recorded settings, then the environment, then explicit assignments."""
    settings = DEFAULTS
    if recorded:
        settings = from_recorded(recorded, "the plan")
    settings = from_text(from_environment(environ), "The environment", settings)
    return from_text(dict(assignments or {}), option(ASSIGNMENTS), settings)


def to_environment(settings: Any, names: Iterable[str] | None = None) -> dict[str, str]:
    """The environment that gives another process (a tensor-parallel rank) these settings (only the
    `names` among them, where given)."""
    values = settings.as_dict()
    keys = values if names is None else [_key(name) for name in names]
    return {BY_NAME[name].env: as_text(values[name]) for name in keys}


def summary(settings: Any) -> str:
    """The settings that differ from the defaults, as `pdl off, smem_carveout 50`; "defaults" where none do."""
    changed = settings.differing()
    return ", ".join(f"{name} {as_text(value)}" for name, value in changed.items()) or "defaults"


def describe_difference(made_with: Mapping[str, Any], now: Any) -> str | None:
    """One line naming the settings a plan was made with that this run changes, or None."""
    now_values = now.recorded()
    changed = [
        f"{name} {as_text(value)} -> {as_text(now_values[name])}"
        for name, value in made_with.items()
        if name in now_values and now_values[name] != value
    ]
    if not changed:
        return None
    return f"this plan was made under other settings; this run uses: {', '.join(changed)}"


_CURRENT: list[Any] = [DEFAULTS]


def current() -> Any:
    """The settings of the fused forward being compiled, captured or run (the defaults outside one)."""
    return _CURRENT[-1]


@contextlib.contextmanager
def scope() -> Iterator[None]:
    """Settings `enter`ed inside the block are current until it ends (a CLI command's, for the rest of it)."""
    depth = len(_CURRENT)
    try:
        yield
    finally:
        del _CURRENT[depth:]


def enter(settings: Any) -> Any:
    """`settings` as current() until the enclosing `scope()` ends."""
    _CURRENT.append(settings)
    return settings


@contextlib.contextmanager
def use(settings: Any) -> Iterator[Any]:
    """`settings` as current() for the duration."""
    _CURRENT.append(settings)
    try:
        yield settings
    finally:
        _CURRENT.pop()
