"""The rotary embedding's cos and sin as one table lookup in the fused step.

HF's rotary module recomputes cos and sin for the step's positions on every call: positions times the
inverse frequencies, a cat, cos, sin, two scales and two casts, ~9 small eager kernels between the
embedding and the first layer (H200 profile of Llama-3.2-1B at batch 1, docs/PERF.md). In the
fused step they become one gather from a table that the module itself filled once, for every position the
cache holds.

Why the table is exact: each entry is one float32 product (position x frequency), then cos or sin, a scale
and a cast, with no reduction whose order could change with the shape of the call; so a row of the table
is what the module returns for that position alone. `build` checks exactly that on a few positions and
returns None when it does not hold (or when the rope type changes its frequencies with the sequence
length: dynamic and long rope), leaving HF's module in place.
"""

from __future__ import annotations

import torch

from accelerate_graph.compat.transformers_internals import rotary_embedding_modules


class RotaryTable:
    """cos and sin of every position below `positions`, side by side in one tensor [positions, 2, dim] so
    that a step gathers both with one kernel."""

    def __init__(self, module: torch.nn.Module, table: torch.Tensor):
        self.module = module
        self.table = table

    @classmethod
    def build(cls, module: torch.nn.Module, positions: int, dtype: torch.dtype) -> RotaryTable | None:
        """The module's own output for positions 0..positions-1, or None where a lone position's output
        differs from its row (then the module is left as it is)."""
        device = module.inv_freq.device
        probe = torch.zeros(1, 1, 1, dtype=dtype, device=device)  # the module reads only its dtype and device
        with torch.no_grad():
            every = torch.arange(positions, device=device)[None]
            cos, sin = module(probe, every)
            table = torch.stack((cos[0], sin[0]), dim=1).contiguous()  # [positions, 2, dim]
            for position in sorted({min(p, positions - 1) for p in (0, 1, positions // 2, positions - 1)}):
                one_cos, one_sin = module(probe, torch.tensor([[position]], device=device))
                if not (
                    torch.equal(one_cos[0, 0], table[position, 0]) and torch.equal(one_sin[0, 0], table[position, 1])
                ):
                    return None
        return cls(module, table)

    def forward(self, x: torch.Tensor, position_ids: torch.Tensor):
        """HF's `(cos, sin)`, each [rows, seq, dim] in the table's dtype: views of one gather."""
        if x.dtype != self.table.dtype:  # a call in another dtype than the table's: the module's own
            return type(self.module).forward(self.module, x, position_ids)
        rows = self.table[position_ids]  # [rows, seq, 2, dim]
        return rows[..., 0, :], rows[..., 1, :]


def rotary_tables(model: torch.nn.Module, positions: int) -> dict[torch.nn.Module, object]:
    """{module: forward} for every rotary module of `model` a table can stand in for, over `positions`
    positions in the model's dtype (for torch_internals.forwards_replaced)."""
    dtype = next(model.parameters()).dtype
    tables = (RotaryTable.build(module, positions, dtype) for module in rotary_embedding_modules(model))
    return {table.module: table.forward for table in tables if table is not None}
