"""Prompts from the command line or a JSONL file, and the tokenizer that turns them into token ids.

Everything here is checked before a model is loaded, so a bad prompt costs nothing and writes nothing.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from accelerate_graph.common.errors import BadOptionError, option

Prompt = str | list[int]  # text, or token ids given directly


def read_prompts_file(path: Path) -> list[Prompt]:
    """One JSON value a line: a string, {"prompt": "..."} or {"input_ids": [..]}; blank lines skipped."""
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as err:
        raise BadOptionError(
            f"{option('prompts', str(path))} cannot be read: {err}.", "Give a UTF-8 JSONL file."
        ) from err
    prompts = [_prompt_from_line(line, path, number) for number, line in enumerate(lines, 1) if line.strip()]
    if not prompts:
        raise BadOptionError(
            f"{option('prompts', str(path))} holds no prompt.", 'Write one JSON value a line, e.g. {"prompt": "Hi"}.'
        )
    return prompts


def _prompt_from_line(line: str, path: Path, number: int) -> Prompt:
    where = f"{option('prompts', str(path))} line {number}"
    try:
        value = json.loads(line)
    except json.JSONDecodeError as err:
        raise BadOptionError(
            f"{where} is not valid JSON: {err.msg}.", 'Write one JSON value a line, e.g. {"prompt": "Hi"}.'
        ) from err
    if isinstance(value, dict):
        if "input_ids" in value:
            return _ids(value["input_ids"], where)
        value = value.get("prompt", value.get("text"))
    if not isinstance(value, str):
        raise BadOptionError(
            f"{where} has no prompt.", 'Use a JSON string, {"prompt": "..."} or {"input_ids": [1, 2]}.'
        )
    return value


def _ids(value, where: str) -> list[int]:
    if not isinstance(value, list) or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value):
        raise BadOptionError(f"{where}: input_ids must be a list of token ids (whole numbers >= 0).")
    return value


def parse_input_ids(text: str) -> list[int]:
    """'1,2,3' (or spaces) -> [1, 2, 3]."""
    items = text.replace(",", " ").split()
    try:
        ids = [int(item) for item in items]
    except ValueError as err:
        raise BadOptionError(
            f"{option('input_ids', text)} is not a list of token ids.", "Write e.g. {input_ids='1,15,27'}."
        ) from err
    if any(i < 0 for i in ids):
        raise BadOptionError(f"{option('input_ids', text)} has a negative id.", "Token ids are whole numbers >= 0.")
    return ids


def collect_prompts(texts: list[str] | None, file: Path | None, input_ids: list[str] | None) -> list[Prompt]:
    given = [name for name, v in (("{prompt}", texts), ("{prompts}", file), ("{input_ids}", input_ids)) if v]
    if len(given) != 1:
        raise BadOptionError(
            "give exactly one of {prompt}, {prompts} and {input_ids}"
            + (f" (got {', '.join(given)})." if given else "."),
            'e.g. {prompt} "Once upon a time".',
        )
    if file is not None:
        prompts = read_prompts_file(file)
    elif input_ids:
        prompts = [parse_input_ids(text) for text in input_ids]
    else:
        prompts = list(texts or [])
    for number, prompt in enumerate(prompts, 1):
        if len(prompt) == 0:
            raise BadOptionError(f"prompt {number} is empty.", "Give every prompt at least one token.")
    return prompts


@dataclass
class Tokens:
    """Token ids for every prompt, and how to turn ids back into text (None: no tokenizer)."""

    ids: list[list[int]]
    tokenizer: object | None

    def decode(self, ids: list[int]) -> str | None:
        if self.tokenizer is None:
            return None
        return self.tokenizer.decode(ids, skip_special_tokens=True)


TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")


def load_tokenizer(source: str | None, revision: str | None = None):
    """The tokenizer saved with the model (a folder or a hub id in the local cache); None without one.
    transformers builds an empty tokenizer from a config alone: a folder must hold a tokenizer file."""
    if source is None:
        return None
    folder = Path(source).expanduser()
    if folder.is_dir() and not any((folder / name).exists() for name in TOKENIZER_FILES):
        return None
    try:
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(source, revision=revision, local_files_only=True)
    except Exception:  # noqa: BLE001 - any failure means: no tokenizer to use
        return None


def encode_prompts(prompts: list[Prompt], tokenizer, model_label: str) -> Tokens:
    """Token ids per prompt; text needs a tokenizer, and every prompt at least one token."""
    ids = []
    for number, prompt in enumerate(prompts, 1):
        if isinstance(prompt, str):
            if tokenizer is None:
                raise BadOptionError(
                    f"{model_label} has no tokenizer, so text prompts cannot be encoded.",
                    "Give token ids with {input_ids='1,15,27'} (or input_ids in {prompts}).",
                )
            prompt = tokenizer(prompt, add_special_tokens=True)["input_ids"]
            if len(prompt) == 0:
                raise BadOptionError(f"prompt {number} encodes to no token with {model_label}'s tokenizer.")
        if len(prompt) == 0:
            raise BadOptionError(f"prompt {number} is empty.", "Give every prompt at least one token.")
        ids.append(list(prompt))
    return Tokens(ids, tokenizer)
