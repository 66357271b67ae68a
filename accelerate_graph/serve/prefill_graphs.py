"""Captured graphs of the engine's prefill forwards: the first part of up to `rows` prompts, each at most `width`
tokens, as one replay (DecodeSession.fresh_forward: the parts attend only themselves, so no cache row is read
and any rows can be written; the rows are a device tensor).

An eager forward costs the host the same few tens of milliseconds whatever its prompts (HF's Python and a launch
per op; ~50 ms at Llama-3.1-8B), and every decoding row waits for it. A replay costs the device's time alone.
Shapes are powers of two, rows x width within twice the engine's chunk; a part is padded on the left up to its
shape's width and a shape's spare rows are pure padding: padding tokens sit at the spare slot, past every position, where
no step reads and no real token looks. A later part of a long prompt reads the slots before it: eager, as before.
"""

from __future__ import annotations

import functools

import torch

from accelerate_graph.core.buckets import powers_of_two_to
from accelerate_graph.core.decode_session import PAD_TOKEN
from accelerate_graph.serve.transfers import upload

SMALLEST_WIDTH = 32


def prefill_shapes(chunk: int, max_rows: int, max_len: int) -> list[tuple[int, int]]:
    """(rows, width) of each graph: powers of two (and the largest bucket's rows), widths from SMALLEST_WIDTH up
    to the longest prompt's (below the cache length) and the chunk's. Any forward the engine runs (rows x the
    longest part within a chunk that is a power of two) rounds up to a shape of at most twice the chunk."""
    top = 1 << (min(chunk, max_len - 1) - 1).bit_length()  # the longest part, rounded up
    widths = [1 << i for i in range(min(top, chunk).bit_length()) if 1 << i >= SMALLEST_WIDTH]
    return [(r, w) for w in widths for r in powers_of_two_to(max_rows) if r * w <= 2 * chunk]


class PrefillGraphs:
    def __init__(self, session, backend, shapes: list[tuple[int, int]]):
        """One graph per shape, largest first (the smaller ones take its pool's blocks), each over its own
        static tokens, positions and rows, left as padding."""
        self.session = session
        self.graphs = {}
        self._inputs = {}
        device = session.device
        for shape in sorted(shapes, key=lambda s: (s[0] * s[1], s), reverse=True):
            rows, width = shape
            tokens = torch.full((rows, width), PAD_TOKEN, dtype=torch.long, device=device)
            positions = torch.full((rows, width), session.spare_slot, dtype=torch.long, device=device)
            cache_rows = torch.zeros(rows, dtype=torch.long, device=device)
            self._inputs[shape] = (tokens, positions, cache_rows)
            self.graphs[shape] = backend.capture(
                functools.partial(session.fresh_forward, cache_rows, tokens, positions)
            )
        self.shapes = sorted(self.graphs, key=lambda s: (s[0] * s[1], s))
        self.replays = 0

    @property
    def memory_bytes(self) -> int:
        return sum(graph.stats.memory_bytes for graph in self.graphs.values())

    def shape_for(self, rows: int, width: int) -> tuple[int, int] | None:
        """The smallest shape holding `rows` parts of up to `width` tokens; None where none does."""
        return next((s for s in self.shapes if s[0] >= rows and s[1] >= width), None)

    def run(self, shape: tuple[int, int], cache_rows: list[int], parts: list[list[int]]) -> torch.Tensor:
        """The parts (each the start of a prompt, from slot 0) into `cache_rows`, by the graph of `shape`;
        returns their last-position logits [len(parts), V] (a copy: the next replay overwrites its output)."""
        rows, width = shape
        spare = self.session.spare_slot
        tokens, positions, where = [], [], []
        for i in range(rows):
            part = parts[i] if i < len(parts) else []
            pads = width - len(part)
            tokens += [PAD_TOKEN] * pads + list(part)
            positions += [spare] * pads + list(range(len(part)))
            where.append(cache_rows[i] if i < len(parts) else cache_rows[0])  # a spare row writes spare slots only
        static_tokens, static_positions, static_rows = self._inputs[shape]
        staged = upload(tokens + positions + where, self.session.device)
        static_tokens.copy_(staged[: rows * width].view(rows, width))
        static_positions.copy_(staged[rows * width : 2 * rows * width].view(rows, width))
        static_rows.copy_(staged[2 * rows * width :])
        self.replays += 1
        return self.graphs[shape].replay()[: len(parts)].clone()
