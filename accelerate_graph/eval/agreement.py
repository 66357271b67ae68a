"""Greedy agreement: our graphs' (and the fused forward's) greedy `generate()` against HF eager's, token by token.

`python -m accelerate_graph.eval.agreement MODEL --prompts N --new-tokens M [--fuse] --json PATH`. The prompts
are N windows of held-out text (the model folder's held_out_sample.txt, or --text), spread over it, all of one
length so the batch has no padding. Each arm is the model's own `generate()` (greedy, exactly M new tokens):
HF eager in the dtype asked for and in float32, and ours through the drop-in (generate/dropin.py). Per pair:
the share of new tokens equal position by position, and the mean length of the common prefix before the first
divergence. HF bf16 against HF float32 says how far rounding alone moves greedy text; ours should sit next to it.
Bad input: one line, exit 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from accelerate_graph.common.errors import BadOptionError, CugraphAccelError, option, option_value

DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}
SHORT = {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32"}


@dataclass(frozen=True)
class PairAgreement:
    first: str  # arm names, e.g. "graphs-bf16" and "hf-bf16"
    second: str
    token_share: float  # new tokens equal at the same position / all new tokens
    mean_prefix: float  # mean over prompts of the tokens generated before the first difference
    identical_rows: int  # prompts whose whole continuation is equal


def compare(first: list[list[int]], second: list[list[int]], names: tuple[str, str]) -> PairAgreement:
    """Rows of new token ids of two arms over the same prompts; a row cut short counts its missing tokens as unequal."""
    if len(first) != len(second) or not first:
        raise ValueError(f"{names}: {len(first)} and {len(second)} rows")
    equal = total = 0
    prefixes: list[int] = []
    for a, b in zip(first, second):
        total += max(len(a), len(b))
        equal += sum(x == y for x, y in zip(a, b))
        prefix = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
        prefixes.append(prefix)
    identical = sum(a == b for a, b in zip(first, second))
    return PairAgreement(names[0], names[1], equal / max(total, 1), sum(prefixes) / len(prefixes), identical)


def held_out_prompts(text: str, tokenizer, count: int, length: int) -> list[list[int]]:
    """`count` windows of `length` token ids, evenly spread over `text` (their starts at i * stride)."""
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    if len(ids) < count * length:
        raise BadOptionError(
            f"the text is {len(ids)} tokens: too few for {count} prompts of {length} tokens.",
            f"Give a longer {option('text')}, or fewer {option('prompts')} or a smaller {option('prompt_len')}.",
        )
    stride = len(ids) // count
    return [list(ids[i * stride : i * stride + length]) for i in range(count)]


def greedy(model, prompts: list[list[int]], new_tokens: int, pad_id: int) -> list[list[int]]:
    """The model's own greedy generate(), exactly `new_tokens` per row (end-of-sequence suppressed until then)."""
    device = next(model.parameters()).device
    ids = torch.tensor(prompts, device=device)
    out = model.generate(
        input_ids=ids,
        attention_mask=torch.ones_like(ids),
        max_new_tokens=new_tokens,
        min_new_tokens=new_tokens,
        do_sample=False,
        pad_token_id=pad_id,
    )
    return out[:, ids.shape[1] :].tolist()


def ours(model, prompts, new_tokens: int, pad_id: int, fuse: bool) -> tuple[list[list[int]], int]:
    """Greedy rows through the drop-in's graphs (fused forward when `fuse`), and the decode steps replayed."""
    from accelerate_graph.generate.dropin import accelerate

    cache = len(prompts[0]) + new_tokens
    with accelerate(model, buckets=(len(prompts),), max_cache_len=cache, fuse=fuse) as handle:
        rows = greedy(model, prompts, new_tokens, pad_id)
    counts = handle.counts
    if counts.graph_steps != new_tokens - 1:
        left = ", ".join(f"{reason} ({n})" for reason, n in counts.eager_calls.items()) or "none"
        raise CugraphAccelError(
            f"the graphs replayed {counts.graph_steps} of the {new_tokens - 1} decode steps "
            f"({counts.eager_on_cache} eager on the cache; calls left to HF: {left}): the agreement would not be ours."
        )
    return rows, counts.graph_steps


def run_agreement(
    model_dir: str,
    prompts: list[list[int]],
    new_tokens: int,
    dtype: torch.dtype = torch.bfloat16,
    device: str = "cpu",
    fuse: bool = False,
) -> dict:
    """Every arm's rows and every pair's agreement, as --json writes them."""
    from accelerate_graph.generate.run import special_ids
    from accelerate_graph.models.loading import load_model

    where = torch.device(device)
    short = SHORT[dtype]
    model = load_model(model_dir, where, dtype).model
    _, pad_id = special_ids(model, None)
    arms = {f"hf-{short}": greedy(model, prompts, new_tokens, pad_id)}
    arms[f"graphs-{short}"], _ = ours(model, prompts, new_tokens, pad_id, fuse=False)
    if fuse:
        arms[f"fused-{short}"], _ = ours(model, prompts, new_tokens, pad_id, fuse=True)
    if dtype != torch.float32:
        del model
        reference = load_model(model_dir, where, torch.float32).model
        arms["hf-fp32"] = greedy(reference, prompts, new_tokens, pad_id)
    mine = [name for name in (f"graphs-{short}", f"fused-{short}") if name in arms]
    pairs = [compare(arms[name], arms[f"hf-{short}"], (name, f"hf-{short}")) for name in mine]
    if dtype != torch.float32:  # HF's own rounding, then ours against float32
        pairs.append(compare(arms[f"hf-{short}"], arms["hf-fp32"], (f"hf-{short}", "hf-fp32")))
        pairs += [compare(arms[name], arms["hf-fp32"], (name, "hf-fp32")) for name in mine]
    return {
        "model": model_dir,
        "dtype": str(dtype).removeprefix("torch."),
        "device": device,
        "prompts": len(prompts),
        "prompt_len": len(prompts[0]),
        "new_tokens": new_tokens,
        "pairs": [asdict(pair) for pair in pairs],
        "arms": {name: {"token_ids": rows} for name, rows in arms.items()},
        "prompt_ids": prompts,
    }


def table(report: dict) -> str:
    lines = [f"{'pair':<28} {'tokens equal':>12} {'mean prefix':>12} {'identical rows':>15}"]
    for pair in report["pairs"]:
        rows = f"{pair['identical_rows']}/{report['prompts']}"
        lines.append(
            f"{pair['first'] + ' vs ' + pair['second']:<28} {pair['token_share']:>11.1%} "
            f"{pair['mean_prefix']:>7.1f}/{report['new_tokens']:<4} {rows:>15}"
        )
    return "\n".join(lines)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m accelerate_graph.eval.agreement", description=__doc__.splitlines()[0]
    )
    parser.add_argument("model", metavar="MODEL", help="a model folder with weights and a tokenizer")
    parser.add_argument("--prompts", type=int, default=16, help="prompts (one batch; default 16)")
    parser.add_argument("--new-tokens", type=int, default=64, help="greedy tokens per prompt (default 64)")
    parser.add_argument("--prompt-len", type=int, default=32, help="tokens per prompt (default 32)")
    parser.add_argument("--text", type=Path, default=None, help="prompt text (default: MODEL/held_out_sample.txt)")
    parser.add_argument("--dtype", default="bfloat16", help=f"one of {', '.join(DTYPES)} (default bfloat16)")
    parser.add_argument("--device", default=None, help="cpu or cuda (default: cuda when there is one)")
    parser.add_argument("--fuse", action="store_true", help="add the fused forward's arm")
    parser.add_argument("--json", type=Path, default=None, help="write the report here")
    return parser


def _flag(name: str, value: str | None) -> str:
    text = "--" + name.replace("_", "-")
    return text if value is None else f"{text} {option_value(value)}"


def _checked(args) -> tuple[list[list[int]], torch.dtype, str]:
    from accelerate_graph.common.atomic_io import check_writable
    from accelerate_graph.eval.windows import read_text
    from accelerate_graph.generate.prompts import load_tokenizer
    from accelerate_graph.training.save import HELD_OUT_SAMPLE

    for name in ("prompts", "new_tokens", "prompt_len"):
        if getattr(args, name) < 1:
            raise BadOptionError(f"{option(name, getattr(args, name))} must be at least 1.")
    if args.new_tokens < 2:
        raise BadOptionError(f"{option('new_tokens', args.new_tokens)} leaves no decode step.", "Use 2 or more.")
    if args.dtype not in DTYPES:
        raise BadOptionError(f"{option('dtype', args.dtype)} is not one of {', '.join(DTYPES)}.")
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device not in ("cpu", "cuda") or (device == "cuda" and not torch.cuda.is_available()):
        raise BadOptionError(f"{option('device', device)} is not cpu or a visible cuda.", "Use {device='cpu'}.")
    if not Path(args.model).is_dir():
        raise BadOptionError(f"MODEL {args.model} is not a folder.", "Give a model folder with a tokenizer.")
    tokenizer = load_tokenizer(args.model)
    if tokenizer is None:
        raise BadOptionError(f"{args.model} has no tokenizer, so its prompt text cannot be encoded.")
    text = read_text(args.text or Path(args.model) / HELD_OUT_SAMPLE)
    if args.json is not None:
        check_writable(args.json, "report")
    return held_out_prompts(text, tokenizer, args.prompts, args.prompt_len), DTYPES[args.dtype], device


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        prompts, dtype, device = _checked(args)
        report = run_agreement(args.model, prompts, args.new_tokens, dtype, device, args.fuse)
        if args.json is not None:
            from accelerate_graph.common.atomic_io import atomic_write_text

            atomic_write_text(args.json, json.dumps(report, indent=1) + "\n")
    except CugraphAccelError as err:
        print(f"error: {err.render(_flag)}", file=sys.stderr)
        return err.exit_code
    print(f"{args.model}: {report['prompts']} prompts x {report['new_tokens']} greedy tokens, {device}")
    print(table(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
