"""The evaluation text as token ids, cut into windows: each window is one cache row's whole life, its
first token prefilled and every later one fed by a decode step (teacher forcing).

A text longer than the windows asked for is cut: only whole windows are scored, the rest is left out.
A window longer than the cache is refused (its later steps would have no slot), as is a text shorter
than two windows (one window gives no interval).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch

from accelerate_graph.common.errors import BadOptionError, option

DEFAULT_WINDOW_LEN = 512  # tokens: long enough to reach later context buckets, short enough to run in minutes
DEFAULT_MAX_WINDOWS = 64  # whole windows scored when --windows is not given
MIN_WINDOWS = 2  # the bootstrap resamples windows: one window has no spread
MIN_WINDOW_LEN = 3  # a prefilled token, a decode step, and the token it predicts


def read_text(path: Path) -> str:
    """The text of `path`: UTF-8, not empty."""
    data = _read_bytes(path, "text")
    if b"\0" in data:
        raise BadOptionError(
            f"{option('text', str(path))} holds NUL bytes: it is a binary file, not text.", "Give a UTF-8 text file."
        )
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise BadOptionError(
            f"{option('text', str(path))} is not UTF-8 text (byte {err.start} is {data[err.start]:#04x}).",
            "Convert it to UTF-8, e.g. with iconv.",
        ) from None
    if not text.strip():
        raise BadOptionError(f"{option('text', str(path))} is empty.", "Give a text of at least two windows of tokens.")
    return text


def read_token_ids(path: Path) -> list[int]:
    """Token ids from `path`: a JSON list of integers, or integers separated by whitespace."""
    data = _read_bytes(path, "tokens")
    try:
        text = data.decode("utf-8").strip()
    except UnicodeDecodeError:
        text = ""
    hint = "Write token ids as a JSON list ([1, 15, 27]) or separated by spaces."
    if not text:
        raise BadOptionError(f"{option('tokens', str(path))} holds no token id.", hint)
    try:
        ids = json.loads(text) if text.startswith("[") else [int(word) for word in text.split()]
    except ValueError:
        raise BadOptionError(
            f"{option('tokens', str(path))} is neither a JSON list of integers nor integers.", hint
        ) from None
    if not isinstance(ids, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
        raise BadOptionError(f"{option('tokens', str(path))} is neither a JSON list of integers nor integers.", hint)
    return ids


def check_vocabulary(ids: list[int], vocab_size: int, path: Path) -> None:
    bad = next((i for i in ids if not 0 <= i < vocab_size), None)
    if bad is not None:
        raise BadOptionError(
            f"{option('tokens', str(path))} holds token id {bad}, outside the model's vocabulary of {vocab_size}.",
            "Give ids made by this model's tokenizer.",
        )


def _read_bytes(path: Path, name: str) -> bytes:
    """The bytes of `path`, given as option `name`."""
    if not path.is_file():
        raise BadOptionError(f"{option(name, str(path))} is not a file.", "Give the path of an existing file.")
    try:
        return path.read_bytes()
    except OSError as err:
        raise BadOptionError(f"{option(name, str(path))} cannot be read: {err.strerror}.") from None


def encode(text: str, tokenizer, model_label: str) -> list[int]:
    """The text's ids by the model's own tokenizer, with no special tokens: windows are slices of it."""
    if tokenizer is None:
        raise BadOptionError(
            f"{model_label} has no tokenizer, so {option('text')} cannot be encoded.",
            f"Give token ids with {option('tokens')} (a file of a JSON list or whitespace-separated integers).",
        )
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    if not ids:
        raise BadOptionError(f"{option('text')} encodes to no token with {model_label}'s tokenizer.")
    return list(ids)


@dataclass(frozen=True)
class Windows:
    tokens: torch.Tensor  # [windows, window_len] token ids
    total_tokens: int  # in the text; those after the last whole window are not scored

    @property
    def count(self) -> int:
        return self.tokens.shape[0]

    @property
    def length(self) -> int:
        return self.tokens.shape[1]

    @property
    def scored_per_window(self) -> int:
        """Predictions scored per window: one per decode step that has a next token to predict."""
        return self.length - 2


def default_window_len(max_cache_len: int) -> int:
    return min(max_cache_len, DEFAULT_WINDOW_LEN)


def cut_windows(ids: list[int], window_len: int, windows: int | None, max_cache_len: int) -> Windows:
    """`windows` whole windows of `window_len` tokens from the start of `ids` (None: as many as fit, up
    to DEFAULT_MAX_WINDOWS)."""
    if window_len > max_cache_len:
        raise BadOptionError(
            f"{option('window_len', window_len)} is longer than the cache of {max_cache_len} slots.",
            f"Use {option('window_len', max_cache_len)} or less, or capture with a larger {option('max_cache_len')}.",
        )
    if window_len < MIN_WINDOW_LEN:
        raise BadOptionError(
            f"{option('window_len', window_len)} is too short.", f"Use at least {MIN_WINDOW_LEN} tokens."
        )
    fit = len(ids) // window_len
    wanted = min(fit, DEFAULT_MAX_WINDOWS) if windows is None else windows
    if wanted < MIN_WINDOWS or fit < wanted:
        raise BadOptionError(
            f"the text is {len(ids)} tokens: {fit} whole window(s) of {window_len}, and eval needs "
            f"{max(wanted, MIN_WINDOWS)}.",
            f"Give a longer text, or a smaller {option('window_len')} or {option('windows')}.",
        )
    chosen = torch.tensor(ids[: wanted * window_len], dtype=torch.long).reshape(wanted, window_len)
    return Windows(chosen, len(ids))
