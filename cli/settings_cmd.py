"""`cugraph-accel settings`: every engine setting, its default, what it takes, why it exists."""

from __future__ import annotations

from rich.table import Table

from accelerate_graph import settings as engine_settings

from .errors import guarded
from .options import ForceFlag, JsonOpt
from .output import Output


@guarded
def settings(json: JsonOpt = None, force: ForceFlag = False) -> None:
    """List the engine's settings: default, allowed values, why, and the environment's value if set.

    `--set NAME=VALUE` sets one for a run; its environment variable (see --json) for every run.

    `capture` records them in the plan; replaying a plan uses those unless told otherwise.

    Examples:

      cugraph-accel settings

      cugraph-accel settings --json -             # the same as JSON

      cugraph-accel bench --set pdl=off           # one setting changed for one run
    """

    out = Output(json)
    out.check_json_writable(force)
    from_environment = engine_settings.from_environment()
    resolved = engine_settings.from_text(from_environment, "The environment")  # a bad value: one line, exit 2
    table = Table(title=f"engine settings (--set NAME=VALUE, or {engine_settings.ENV_PREFIX}<NAME>)")
    for column in ("name", "default", "allowed", "environment", "why"):
        table.add_column(column, overflow="fold")
    listed = []
    for setting in engine_settings.REGISTRY:
        default = engine_settings.as_text(setting.default)
        here = engine_settings.as_text(getattr(resolved, setting.name)) if setting.name in from_environment else ""
        table.add_row(setting.name, default, setting.allowed, here, setting.why)
        listed.append(
            {
                "name": setting.name,
                "default": setting.default,
                "allowed": setting.allowed,
                "environment_variable": setting.env,
                "environment": getattr(resolved, setting.name) if setting.name in from_environment else None,
                "recorded_in_plan": setting.name not in engine_settings.UNRECORDED,
                "why": setting.why,
            }
        )
    out.show(table)
    out.emit_json({"settings": listed})
