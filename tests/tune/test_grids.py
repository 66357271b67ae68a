"""The configs `tune` tries: the kinds that won somewhere, the likeliest first."""

from __future__ import annotations

import dataclasses

import pytest

from accelerate_graph.fused.kernels import configs
from accelerate_graph.quant.fp8_matmul import SKINNY_MAX_ROWS
from accelerate_graph.tune import grids


@pytest.mark.parametrize("k", [896, 2048, 8192])
def test_the_lookahead_grid_holds_two_blocks_in_registers_and_walks_k(k):
    grid = grids.lookahead_one_row_grid(k)
    assert grid and len(set(grid)) == len(grid)
    for cfg in grid:
        assert cfg.lookahead and not cfg.dot
        assert cfg.block_n * cfg.block_k <= 32 * 32 * cfg.num_warps  # values a thread, per block
        assert -(-k // cfg.split_k) >= 2 * cfg.block_k  # a next block to load ahead


@pytest.mark.parametrize("n, k", [(896, 896), (2048, 2048), (1152, 896), (896, 4864), (4864, 896)])
def test_the_narrow_grid_gives_a_third_of_the_multiprocessors_work_most_programs_first(n, k):
    grid = grids.narrow_rows_grid(n, k, sms=132)
    programs = [-(-n // c.block_n) * c.split_k for c in grid]
    assert grid and len(set(grid)) == len(grid)
    assert min(programs) >= 132 // 3 and programs == sorted(programs, reverse=True)
    assert all(c.dot and c.split_k * c.block_k <= k for c in grid)
    assert {c.swap for c in grid} == {True, False} and max(c.split_k for c in grid) == (8 if k >= 4096 else 4)


def test_one_row_tries_the_lookahead_tiles_first_then_the_others():
    grid = grids.grid(1, 4864, 896)
    ahead = [c.lookahead for c in grid]
    assert ahead[0] and not ahead[-1] and ahead == sorted(ahead, reverse=True)
    assert not any(c.dot for c in grid) and len(set(grid)) == len(grid)


@pytest.mark.parametrize("rows", [8, 16, 32])
def test_more_rows_try_tensor_cores_alone_narrow_tiles_first(rows):
    grid = grids.grid(rows, 896, 4864)
    narrow = grids.narrow_rows_grid(896, 4864)
    assert grid[: len(narrow)] == narrow
    assert grid and all(c.dot and not c.lookahead for c in grid) and len(set(grid)) == len(grid)
    assert {c.swap for c in grid} == {True, False}


def test_the_shipped_tables_configs_are_of_the_kinds_tune_tries():
    """Every config the shipped H200 table holds is a kind the grids produce (one row: multiply-and-sum, with
    or without lookahead; more rows: tensor cores), so re-tuning on an H200 can find them again."""
    for key, cfg in configs.read_table(configs.shipped_table_path("NVIDIA H200")).items():
        one_row = key.split("|")[1] == "m1"
        assert cfg.dot != one_row, key
        assert not cfg.lookahead or one_row, key


def test_describe_is_one_short_line():
    cfg = configs.SkinnyConfig(16, 256, 4, 2, lookahead=True)
    assert grids.describe(cfg) == "n16 k256 w4 s2 x1 fma ahead"
    assert (
        grids.describe(configs.SkinnyConfig(64, 128, 4, 4, split_k=2, dot=True, swap=True)) == "n64 k128 w4 s4 x2 swap"
    )


FP8_SHAPES = [(6144, 4096), (28672, 4096), (4096, 14336), (1152, 896), (896, 4864), (256, 128)]


@pytest.mark.parametrize("rows", [1, 8, 16])
@pytest.mark.parametrize("n, k", FP8_SHAPES)
def test_every_fp8_block_config_lies_inside_one_scale_block(rows, n, k):
    from accelerate_graph.quant.fp8_skinny import fitted

    grid = grids.fp8_grid(rows, n, k, 128)
    assert grid and len(set(grid)) == len(grid)
    assert all(fitted(cfg, 128) == cfg for cfg in grid)
    assert all(128 % cfg.block_n == 0 and (not cfg.dot or 128 % cfg.block_k == 0) for cfg in grid)
    assert set(grid) <= set(grids.fp8_grid(rows, n, k, None))  # per-channel scales take any tile


@pytest.mark.parametrize("n, k", FP8_SHAPES)
def test_fp8_few_rows_try_narrow_streams_then_a_few_tensor_core_tiles(n, k):
    one = grids.fp8_grid(1, n, k, None)
    staged = [c for c in one if c.staged]  # first the K walks pipelined through shared memory, nothing else so
    assert staged and one[: len(staged)] == staged and not any(c.dot or c.lookahead for c in staged)
    assert all(c.num_stages >= 3 and 8 * 32 * c.num_warps <= c.block_n * c.block_k for c in staged)
    one = one[len(staged) :]
    dots = [c for c in one if c.dot]
    assert 1 <= len(dots) <= 5 and all(c.split_k * c.block_k <= max(k, 64) for c in dots)
    first_dot = one.index(dots[0])
    assert first_dot > 0 and all(c.block_n <= 4 and c.block_k >= 1024 for c in one[:first_dot])
    assert one[first_dot : first_dot + len(dots)] == dots  # then the tensor cores, then the wider float32 tiles
    rest = [c for c in one if not c.dot][first_dot:]
    ahead = [c.lookahead for c in rest if c.split_k == 1]
    assert ahead == sorted(ahead, reverse=True)  # the tiles with the next block loaded ahead first, split-K last
    assert [c.split_k > 1 for c in rest] == sorted(c.split_k > 1 for c in rest)
    for cfg in (c for c in one if not c.dot):
        assert 8 * 32 * cfg.num_warps <= cfg.block_n * cfg.block_k <= 64 * 32 * cfg.num_warps
        if cfg.lookahead:  # two tiles in registers, a second tile to load ahead
            assert cfg.block_n * cfg.block_k <= 32 * 32 * cfg.num_warps and k // cfg.split_k >= 2 * cfg.block_k
    two = grids.fp8_grid(2, n, k, None)  # both rows' products in registers: tiles half as large
    if k >= 1024:  # the default is a candidate: a table is never one the default would have beaten untried
        from accelerate_graph.quant.fp8_skinny import default_config

        assert default_config(1, n, k) in one and default_config(2, n, k) in two
    fma_two = [c for c in two if not c.dot and not c.staged]
    assert fma_two and [c for c in two if c.dot] == dots
    assert all(2 * c.block_n * c.block_k <= 64 * 32 * c.num_warps for c in fma_two)
    assert max(c.block_n * c.block_k for c in fma_two) < max(c.block_n * c.block_k for c in one if not c.dot)
    for rows in (8, 16):
        more = grids.fp8_grid(rows, n, k, None)
        assert all(c.dot and not c.lookahead and c.split_k * c.block_k <= k for c in more)
        busy = [grids.programs(n, c.block_n, c.split_k) >= 132 for c in more]
        assert busy == sorted(busy, reverse=True)  # every multiprocessor busy first


@pytest.mark.parametrize("n, k", FP8_SHAPES)
def test_fp8_rows_try_e4m3_tensor_cores_first_on_whole_warpgroups(n, k):
    """e4m3_dot only where the compiler makes e4m3 warpgroup MMAs of it (swapped, a warpgroup of 4 warps for
    every 64 outputs at most; on 2 warps it converts both operands to fp16), and first among tiles as busy as
    they are."""
    for rows in (1, 8, 32):
        grid = grids.fp8_grid(rows, n, k, None)
        e4m3 = [c for c in grid if c.e4m3_dot]
        assert e4m3 and all(c.dot and c.swap and c.num_warps in (4, 8) and c.block_n % (16 * c.num_warps) == 0
                            for c in e4m3)  # fmt: skip
        if rows > 2:
            for busy in (True, False):
                group = [c.e4m3_dot for c in grid if (grids.programs(n, c.block_n, c.split_k) >= 132) == busy]
                assert group == sorted(group, reverse=True)
    wide = configs.SkinnyConfig(128, 128, 4, 4, dot=True, swap=True, e4m3_dot=True)
    assert grids.describe(wide) == "n128 k128 w4 s4 x1 swap e4m3"


@pytest.mark.parametrize("n, k", FP8_SHAPES)
def test_fp8_gate_up_rows_also_try_both_halves_in_one_walk(n, k):
    """The merged gate/up above 2 rows adds its paired walks (bf16-operand tensor cores, two weight tiles and
    one x tile a stage within shared memory), after the e4m3 tiles as busy as they are; nothing else does."""
    for rows in (1, 2, 8, 32):
        plain, merged = grids.fp8_grid(rows, n, k, None), grids.fp8_grid(rows, n, k, None, gate_up=True)
        paired = [c for c in merged if c.pair]
        assert not any(c.pair for c in plain) and set(plain) <= set(merged)
        assert bool(paired) == (rows > 2) and set(merged) - set(plain) == set(paired)
        for cfg in paired:
            assert cfg.dot and not cfg.e4m3_dot and grids.describe(cfg).endswith(" pair")
            stage = 2 * cfg.block_n * cfg.block_k + 32 * cfg.block_k * 2  # two e4m3 weight tiles, 32 bf16 rows
            assert cfg.num_stages * stage <= 227 * 1024
        if rows <= 2:
            continue
        busy = [grids.programs(n, c.block_n, c.split_k) >= 132 for c in merged]
        assert busy == sorted(busy, reverse=True)
        for group in (True, False):
            kinds = [2 if c.e4m3_dot else 1 if c.pair else 0 for c, b in zip(merged, busy) if b == group]
            assert kinds == sorted(kinds, reverse=True)


@pytest.mark.parametrize("n, k", FP8_SHAPES)
def test_fp8_normed_rows_run_the_norm_apart_above_16_rows(n, k):
    """A call with the norm folded in runs it as its own kernel with every tile above 16 rows, tries it with the
    e4m3 tiles too at 3-16 rows, and never at 1-2 rows; a call without a norm never."""
    for rows in (1, 2, 8, 16, 32):
        for gate_up in (False, True):
            # x_apart tiles make the norm with x's terms (test_fp8_rows_also_make_x_terms_apart)
            plain = [c for c in grids.fp8_grid(rows, n, k, None, gate_up=gate_up) if not c.x_apart]
            normed = [c for c in grids.fp8_grid(rows, n, k, None, gate_up=gate_up, normed=True) if not c.x_apart]
            apart = [c for c in normed if c.norm_apart]
            assert not any(c.norm_apart for c in plain)
            assert all(grids.describe(c).endswith(" apart") for c in apart)
            folded = [dataclasses.replace(c, norm_apart=False) for c in apart]
            if rows <= 2:
                assert normed == plain
            elif rows <= 16:
                assert [c for c in normed if not c.norm_apart] == plain
                assert set(folded) == {c for c in plain if c.e4m3_dot} != set()
            else:
                assert folded == plain


@pytest.mark.parametrize("n, k", FP8_SHAPES)
def test_fp8_rows_also_make_x_terms_apart(n, k):
    """Above 2 rows each e4m3 tile has a twin whose x terms (and norm) a kernel of its own makes first, never with
    the norm apart too, right after the e4m3 tiles that split x in their loops among those as busy (the norm-apart
    ones at 3-16 rows come later); none at 1-2 rows."""
    for rows in (1, 2, 8, 32):
        for gate_up, normed in ((False, False), (True, True), (False, True)):
            grid = grids.fp8_grid(rows, n, k, None, gate_up=gate_up, normed=normed)
            twins = [c for c in grid if c.x_apart]
            e4m3 = {dataclasses.replace(c, norm_apart=False) for c in grid if c.e4m3_dot and not c.x_apart}
            if rows <= 2:
                assert not twins
                continue
            assert {dataclasses.replace(c, x_apart=False) for c in twins} == e4m3 != set()
            assert all(c.e4m3_dot and not c.norm_apart and grids.describe(c).endswith(" x-apart") for c in twins)
            for busy in (True, False):
                group = [c for c in grid if (grids.programs(n, c.block_n, c.split_k) >= 132) == busy]
                first = [c.e4m3_dot and not c.x_apart and (not c.norm_apart or rows > 16) for c in group]
                kinds = [2 if one else 1 if c.x_apart else 0 for c, one in zip(group, first)]
                assert kinds == sorted(kinds, reverse=True), (rows, busy, [grids.describe(c) for c in group])


def test_an_fp8_sweep_of_a_model_fits_the_default_budget():
    """About 25-35 configs an op and bucket (a compile, a check and a timed replay each): the 8B's four ops as the
    folded step calls them (q/k/v and gate/up with the norm, gate/up merged) at 1, 8, 16 and 32 rows under 580
    trials, every decode batch the kernel runs."""
    ops = [
        (6144, 4096, False, True),
        (4096, 4096, False, False),
        (14336, 4096, True, True),
        (4096, 14336, False, False),
    ]
    for block in (None, 128):
        trials = sum(
            len(grids.fp8_grid(rows, n, k, block, gate_up=gate_up, normed=normed))
            for rows in configs.M_BUCKETS
            for n, k, gate_up, normed in ops
        )
        assert trials <= 580 and max(configs.M_BUCKETS) <= SKINNY_MAX_ROWS, (block, trials)
