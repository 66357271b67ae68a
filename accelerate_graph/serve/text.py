"""Tokens in, streamed text out, with stop strings: what each new token adds to the text, held back while it
could still be the start of a stop string, and cut where a stop string appears.

Each token decodes a short window (the tokens since the last piece of text and a few before it, for context),
so a token costs the same whatever the length of the output; a window ending in half a character waits.
"""

from __future__ import annotations

REPLACEMENT = "\ufffd"  # what a tokenizer decodes half of a multi-byte character to


class IncrementalText:
    def __init__(self, tokenizer, stops: list[str] | None = None):
        self.tokenizer = tokenizer  # None: the ids themselves are the text
        self.stops = list(stops or [])
        self.ids: list[int] = []
        self.text = ""  # decoded so far (cut at a stop string once one appears)
        self.sent = 0  # characters of `text` handed out
        self.stopped = False  # a stop string appeared: the text ends before it
        self._prefix = 0  # the window's first token (context only)
        self._read = 0  # tokens before this one are in `text`

    def push(self, token: int) -> str:
        """The text that may be sent now that `token` came; '' while it waits."""
        if self.stopped:
            return ""
        self.ids.append(token)
        self.text += self._decoded(final=False)
        return self._release()

    def finish(self) -> str:
        """What is left to send when the generation ends (not at a stop string)."""
        if self.stopped:
            return ""
        self.text += self._decoded(final=True)
        piece = self.text[self.sent :]
        self.sent = len(self.text)
        return piece

    def _decoded(self, final: bool) -> str:
        if self.tokenizer is None:
            piece = "".join(f"{t} " for t in self.ids[self._read :])
            self._read = len(self.ids)
            return piece
        before = self.tokenizer.decode(self.ids[self._prefix : self._read], skip_special_tokens=True)
        after = self.tokenizer.decode(self.ids[self._prefix :], skip_special_tokens=True)
        if not final and (after.endswith(REPLACEMENT) or len(after) <= len(before)):
            return ""  # half a character, or a token that adds no text yet: wait for the next one
        piece = after[len(before) :]
        self._prefix, self._read = self._read, len(self.ids)
        return piece

    def _release(self) -> str:
        start = self.sent
        if self.stops:
            longest = max(len(s) for s in self.stops)
            window = max(0, self.sent - longest + 1)
            found = [i for i in (self.text.find(s, window) for s in self.stops) if i >= 0]
            if found:
                self.text = self.text[: min(found)]
                self.stopped = True
                self.sent = len(self.text)
                return self.text[start:]
            end = len(self.text) - _held(self.text, self.stops)
        else:
            end = len(self.text)
        self.sent = max(self.sent, end)
        return self.text[start : self.sent]


def _held(text: str, stops: list[str]) -> int:
    """How many characters at the end of `text` could begin a stop string (kept until the next token)."""
    for size in range(min(len(text), max(len(s) for s in stops) - 1), 0, -1):
        tail = text[-size:]
        if any(stop.startswith(tail) for stop in stops):
            return size
    return 0
