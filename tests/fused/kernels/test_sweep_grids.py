"""The config grids benchmarks/step_sweep.py walks above one row (benchmarks/kernel_sweep.py)."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks"))

from kernel_sweep import rows_grid_in_a_step  # noqa: E402


@pytest.mark.parametrize("rows", [8, 16, 32])
def test_above_one_row_the_step_sweep_tries_tensor_cores_alone(rows):
    grid = rows_grid_in_a_step(rows, 896)
    assert grid and all(c.dot for c in grid)
    assert grid[0].swap  # the weights on the MMA's long side first (stop 23's best per op)
    assert len(set(grid)) == len(grid)


def test_the_sweep_knows_the_lm_head_as_a_one_weight_projection():
    from kernel_sweep import shapes

    assert shapes("llama-3.2-1b")[-1] == ("lm_head", "proj", (128256,), 2048, False)
    assert shapes("qwen2.5-0.5b", merged=True)[-1] == ("lm_head", "proj", (151936,), 896, False)


@pytest.mark.parametrize("k", [896, 2048, 8192])
def test_the_lookahead_grid_holds_two_blocks_in_registers_and_walks_k(k):
    from kernel_sweep import describe, lookahead_one_row_grid, parse_described

    grid = lookahead_one_row_grid(k)
    assert grid and len(set(grid)) == len(grid)
    for cfg in grid:
        assert cfg.lookahead and not cfg.dot
        assert cfg.block_n * cfg.block_k <= 32 * 32 * cfg.num_warps  # values a thread, per block
        assert -(-k // cfg.split_k) >= 2 * cfg.block_k  # a next block to load ahead
        assert parse_described(describe(cfg)) == cfg


@pytest.mark.parametrize("n, k", [(896, 896), (2048, 2048), (1152, 896), (896, 4864), (4864, 896)])
def test_the_narrow_grid_gives_a_third_of_the_multiprocessors_work_most_programs_first(n, k):
    from kernel_sweep import describe, narrow_rows_grid, parse_described

    grid = narrow_rows_grid(n, k, sms=132)
    programs = [-(-n // c.block_n) * c.split_k for c in grid]
    assert grid and len(set(grid)) == len(grid)
    assert min(programs) >= 132 // 3 and programs == sorted(programs, reverse=True)
    assert all(c.dot and c.split_k * c.block_k <= k for c in grid)
    assert {c.swap for c in grid} == {True, False} and max(c.split_k for c in grid) == (8 if k >= 4096 else 4)
    assert all(parse_described(describe(c)) == c for c in grid)


def test_the_step_sweep_takes_the_ops_it_is_told_and_refuses_others(monkeypatch, capsys):
    import step_sweep

    monkeypatch.setattr(sys, "argv", ["step_sweep.py", "qwen2.5-0.5b", "--ops", "o,attention"])
    with pytest.raises(SystemExit) as exit_:
        step_sweep.main()
    assert exit_.value.code == 2 and "--ops takes a comma list of gate_up, down, qkv, o" in capsys.readouterr().err


@pytest.mark.parametrize("rows", [2, 8, 16])
@pytest.mark.parametrize("k", [896, 4864])
def test_the_multiply_and_sum_grid_holds_16_to_64_values_a_thread_without_tensor_cores(rows, k):
    from kernel_sweep import describe, fma_rows_grid, parse_described

    grid = fma_rows_grid(rows, k)
    assert grid and len(set(grid)) == len(grid)
    for cfg in grid:
        assert not cfg.dot and not cfg.lookahead
        assert 16 <= cfg.block_m(rows) * cfg.block_n * cfg.block_k // (32 * cfg.num_warps) <= 64
        assert parse_described(describe(cfg)) == cfg
    assert any(cfg.split_k > 1 for cfg in grid) == (k >= 4096)


@pytest.mark.parametrize(("n", "k"), [(1152, 896), (9728, 896), (896, 4864), (2048, 2048), (2048, 8192)])
def test_the_whole_k_grid_gives_each_program_its_k_walk_in_one_block(n, k):
    from kernel_sweep import describe, parse_described, whole_k_rows_grid

    grid = whole_k_rows_grid(n, k)
    assert grid and len(set(grid)) == len(grid)
    programs = [-(-n // cfg.block_n) * cfg.split_k for cfg in grid]
    assert programs == sorted(programs, reverse=True) and min(programs) >= 132 // 3
    for cfg in grid:
        assert cfg.dot and cfg.num_stages == 1 and cfg.block_k in (512, 1024)
        assert (cfg.split_k - 1) * cfg.block_k < k <= cfg.split_k * cfg.block_k  # one block a slice, none empty
        assert cfg.block_n * cfg.block_k <= 32768
        assert parse_described(describe(cfg)) == cfg
