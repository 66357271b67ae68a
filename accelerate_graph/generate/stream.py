"""Incremental text for streaming: decode everything so far, hand out only what is new."""

from __future__ import annotations

from collections.abc import Sequence


class TextStream:
    """Tokens in, new text out; stops at the first end-of-sequence token. Without a tokenizer the
    ids themselves are the text."""

    def __init__(self, tokenizer, eos_ids: Sequence[int] = ()):
        self.tokenizer = tokenizer
        self.eos = set(eos_ids)
        self.ids: list[int] = []
        self.shown = ""
        self.done = False

    def push(self, new: list[int]) -> str:
        if self.done:
            return ""
        for token in new:
            if token in self.eos:
                self.done = True
                break
            self.ids.append(token)
        if self.tokenizer is None:
            text = "".join(f"{t} " for t in self.ids)
        else:
            text = self.tokenizer.decode(self.ids, skip_special_tokens=True)
            if text.endswith("\ufffd") and not self.done:
                return ""  # half of a multi-byte character: wait for the rest
        fresh = text[len(self.shown) :] if text.startswith(self.shown) else text
        self.shown = text
        return fresh
