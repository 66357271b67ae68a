"""Which runs verify makes: every captured graph, full and padded, and each context crossing."""

from accelerate_graph.core.buckets import auto_contexts
from accelerate_graph.verify.cases import (
    SOAK_REPLAYS,
    VERIFY,
    Case,
    describe_slots,
    graphs_replayed,
    plan_cases,
    sliding_window,
    uncovered,
)


def test_every_graph_of_the_half_billion_recipe_is_replayed():
    buckets, contexts = (1, 8, 16, 32), auto_contexts(1024)  # the 0.5B recipe's defaults: 12 graphs
    plan = plan_cases(buckets, contexts, steps=8, prompt_len=128)
    assert uncovered(plan, buckets, contexts) == []
    assert not plan.shortened
    inside = [c for c in plan.cases if not c.crossing]
    # each bucket at each context, at full size and at its most-padded size, all 8 steps inside the bucket
    assert {(c.bucket, c.batch, c.context) for c in inside} == {
        (b, n, c) for b, n in ((1, 1), (8, 8), (8, 2), (16, 16), (16, 9), (32, 32), (32, 17)) for c in contexts
    }
    for case in inside:
        assert graphs_replayed(case, buckets, contexts) == {(case.bucket, case.context)}, case
    assert {(c.start, c.context) for c in inside} == {(128, 256), (256, 512), (512, 1024)}
    crossings = [c for c in plan.cases if c.crossing]
    assert {(c.bucket, c.start) for c in crossings} == {(32, 252), (1, 252), (32, 508), (1, 508)}
    assert all(len(graphs_replayed(c, buckets, contexts)) == 2 for c in crossings)
    assert plan.prefill_len == 512 and plan.rows == 32


def test_the_readme_fuse_command_replays_all_twenty_graphs():
    buckets, contexts = (1, 8, 16, 32), auto_contexts(4096)
    plan = plan_cases(buckets, contexts, steps=8, prompt_len=128)
    assert len({(b, c) for b in buckets for c in contexts}) == 20
    assert uncovered(plan, buckets, contexts) == []


def test_a_prompt_that_leaves_no_room_moves_the_start_instead_of_cutting_steps():
    plan = plan_cases((1,), (16,), steps=8, prompt_len=12)
    assert plan.cases == [Case(1, 1, 16, 8, 8)] and not plan.shortened


def test_a_context_bucket_narrower_than_the_steps_is_shortened_and_said():
    plan = plan_cases((1,), (16, 20, 64), steps=8, prompt_len=6)
    assert uncovered(plan, (1,), (16, 20, 64)) == []
    narrow = [s for s in plan.shortened if s.case.context == 20 and not s.case.crossing]
    assert len(narrow) == 1 and (narrow[0].asked, narrow[0].run) == (8, 4)
    assert narrow[0].case.start == 16 and "context 20 holds slots 16-19" in narrow[0].why
    assert narrow[0].as_json()["asked"] == 8 and "4 of 8 steps" in narrow[0].line()
    crossing = [s for s in plan.shortened if s.case.crossing]  # 16 -> 20 crossing: 12..19 is 8 steps, fits
    assert all(s.case.start + s.case.steps <= 64 for s in crossing)


def test_a_cache_smaller_than_the_steps_is_shortened():
    plan = plan_cases((1,), (6,), steps=8, prompt_len=3)
    assert [(c.start, c.steps) for c in plan.cases] == [(1, 5)]
    assert plan.shortened[0].why == "context 6 holds slots 0-5"


def test_verify_spreads_windows_over_every_context_bucket_first_and_last_slots_included():
    buckets, contexts = (1, 2, 4, 8), (256,)  # the quick-start tiny plan
    plan = plan_cases(buckets, contexts, steps=8, prompt_len=16, coverage=VERIFY)
    assert describe_slots(plan.cases, 256) == "slots 1-8, 16-23, 125-132, 248-255 of 256"
    assert uncovered(plan, buckets, contexts) == [] and plan.coverage.soak == SOAK_REPLAYS > 40
    two = plan_cases((1, 4), (16, 64), steps=4, prompt_len=6, coverage=VERIFY)
    covered = {slot for c in two.cases for slot in range(c.start, c.start + c.steps)}
    assert {1, 15, 16, 63} <= covered and max(c.start for c in two.cases) == 60
    assert two.prefill_len == 60 and not two.shortened


def test_full_batches_are_left_padded_with_row_zero_whole():
    plan = plan_cases((1, 4), (16, 64), steps=4, prompt_len=6, coverage=VERIFY)
    for case in plan.cases:
        if case.batch == case.bucket == 4 and case.start > 1:
            assert case.pads[0] == 0 and case.pads[-1] == case.start - 1 and len(set(case.pads)) == 4, case
        else:
            assert case.pads == (), case  # batch 1, a padded batch, or no prompt slot to spare
    assert Case(4, 4, 16, 6, 4, pads=(0, 2, 3, 5)).describe().endswith("left padding 0/2/3/5")
    assert all(c.pads == () for c in plan_cases((1, 4), (16, 64), 4, 6).cases)  # BASIC: none


def test_each_repeat_moves_the_windows_between_first_and_last_and_the_padding():
    one, two = (plan_cases((1, 8), (256,), 8, 16, coverage=VERIFY.again(n)) for n in (1, 2))
    assert describe_slots(one.cases, 256) != describe_slots(two.cases, 256)
    for plan in (one, two):
        starts = {c.start for c in plan.cases}
        assert {1, 248} <= starts
    assert {c.pads for c in one.cases if c.pads} != {c.pads for c in two.cases if c.pads}
    for shape in (((1, 8), (256,), 8, 16), ((1, 4), (16, 64), 4, 6), ((1,), (16,), 8, 6)):
        counts = {len(plan_cases(*shape, coverage=VERIFY.again(n)).cases) for n in range(6)}
        assert len(counts) == 1, (shape, counts)  # every repeat runs as many cases


def test_the_sliding_windows_edge_is_crossed():
    plan = plan_cases((1,), (64, 256), steps=8, prompt_len=16, coverage=VERIFY, window=100)
    assert any(c.start < 100 <= c.start + c.steps - 1 for c in plan.cases)
    assert (
        plan_cases((1,), (256,), 8, 16, coverage=VERIFY, window=4096).cases
        == plan_cases((1,), (256,), 8, 16, coverage=VERIFY).cases
    )  # a window wider than the cache has no edge in it


def test_a_window_is_read_only_where_a_layer_slides():
    from transformers import LlamaConfig, Qwen2Config

    assert sliding_window(LlamaConfig()) is None
    assert sliding_window(Qwen2Config(sliding_window=64, use_sliding_window=False)) is None
    config = Qwen2Config(sliding_window=64, use_sliding_window=True, num_hidden_layers=2, max_window_layers=0)
    assert sliding_window(config) == 64
