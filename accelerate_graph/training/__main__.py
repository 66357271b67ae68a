"""`python -m accelerate_graph.training NAME --out DIR`: train a model of model_specs.SPECS into DIR.

Several names train one after the other into DIR/NAME, sharing a tokenizer where their specs agree.
`--list` names the models; `--budget-s` and `--steps` override the spec's. Bad input: one line, exit 2.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from accelerate_graph.common.errors import BadOptionError, CugraphAccelError, option, option_value


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m accelerate_graph.training", description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", metavar="NAME", help="the model(s) to train (see --list)")
    parser.add_argument("--out", type=Path, help="the folder to write (replaced); with several names, their parent")
    parser.add_argument("--device", default=None, help="cpu or cuda (default: the spec's)")
    parser.add_argument("--budget-s", type=float, default=None, help="training seconds (default: the spec's)")
    parser.add_argument("--steps", type=int, default=None, help="training steps (default: the spec's, if any)")
    parser.add_argument("--list", action="store_true", help="list the models and exit")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        return _run(args)
    except CugraphAccelError as err:
        print(f"error: {err.render(_flag)}", file=sys.stderr)
        return err.exit_code


def _flag(name: str, value: str | None) -> str:
    """An option of this command line as its flag: errors name them by train_model's keywords."""
    text = "--" + name.replace("_", "-")
    parsed = None if value is None else option_value(value)
    return text if value is None or parsed is True else f"{text} {parsed}"


def _run(args) -> int:
    import torch

    from accelerate_graph.training.model_specs import SPECS, find_spec
    from accelerate_graph.training.run import train_model

    if args.list:
        for spec in SPECS.values():
            length = f"{spec.steps} steps" if spec.steps else f"{spec.budget_s:.0f} s"
            print(f"{spec.name:<16} {spec.device:<5} {length:>9}  {spec.description}")
        return 0
    if not args.names or args.out is None:
        raise BadOptionError("give a model NAME and {out=DIR}.", "Run with {list=True} for the names.")
    specs = [find_spec(name) for name in dict.fromkeys(args.names)]
    if args.budget_s is not None and args.budget_s <= 0:
        raise BadOptionError(f"{option('budget_s')} must be positive, not {args.budget_s}.")
    if args.steps is not None and args.steps <= 0:
        raise BadOptionError(f"{option('steps')} must be positive, not {args.steps}.")
    if args.out.exists() and not args.out.is_dir():
        raise BadOptionError(f"{option('out', str(args.out))} is a file, not a folder.", "Give a folder path.")
    kinds = [args.device or spec.device for spec in specs]
    for kind in kinds:
        if kind not in ("cpu", "cuda"):
            raise BadOptionError(f"{option('device', kind)} is not cpu or cuda.")
        if kind == "cuda" and not torch.cuda.is_available():
            raise BadOptionError("a model trains on cuda, but no CUDA GPU is visible.", "Use {device='cpu'}.")
    devices = [torch.device(kind) for kind in kinds]
    for spec, device in zip(specs, devices):
        out = args.out if len(specs) == 1 else args.out / spec.name
        steps = args.steps if args.steps is not None else spec.steps
        command = f"python -m accelerate_graph.training {spec.name} --out DIR"
        train_model(spec, out, device, steps, args.budget_s or spec.budget_s, command=command)
    return 0


if __name__ == "__main__":
    sys.exit(main())
