"""The config grids benchmarks/step_sweep.py walks above one row (benchmarks/kernel_sweep.py)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks"))

from kernel_sweep import fma_rows_grid, rows_grid_in_a_step  # noqa: E402


def test_up_to_8_rows_the_step_sweep_tries_multiply_and_sum_first():
    fma = fma_rows_grid()
    grid = rows_grid_in_a_step(8, 896)
    assert grid[: len(fma)] == fma  # first: the budget cuts the end of the grid
    assert not any(c.dot for c in fma)
    assert all(c.block_m(8) == 8 for c in fma)  # 8 rows, no padding to tensor cores' 16
    assert all(c.block_n * c.block_k <= 1024 for c in fma)  # the [rows, N, K] product in registers
    assert len(set(grid)) == len(grid)


def test_above_8_rows_the_step_sweep_tries_tensor_cores_alone():
    grid = rows_grid_in_a_step(16, 896)
    assert grid and all(c.dot for c in grid)
    assert grid[0].swap  # the weights on the MMA's long side first (stop 23's best per op)
