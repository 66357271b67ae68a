import pytest

from accelerate_graph.common.errors import BadOptionError
from accelerate_graph.core.buckets import bucket_for, padded_batch, parse_buckets
from accelerate_graph.models.recipes import RecipeDefaults


def test_parse_sorts_and_strips():
    assert parse_buckets(" 16, 1,8 ") == (1, 8, 16)


@pytest.mark.parametrize("text", ["0", "-3", "a,b", "1,,2", "", " ", "4,4", "1.5"])
def test_parse_rejects(text):
    with pytest.raises(BadOptionError):
        parse_buckets(text)


def test_bucket_for_pads_up_and_reports_overflow():
    buckets = (1, 8, 16, 32)
    assert bucket_for(1, buckets) == 1
    assert bucket_for(2, buckets) == 8
    assert bucket_for(8, buckets) == 8
    assert bucket_for(17, buckets) == 32
    assert bucket_for(32, buckets) == 32
    assert bucket_for(33, buckets) is None  # never a crash past the largest bucket


def test_default_buckets_end_at_their_maximum():
    default = RecipeDefaults().buckets  # what a model without a recipe gets
    assert default == tuple(sorted(default))
    assert all(bucket_for(b, default) is not None for b in range(1, max(default) + 1))


def test_padded_batch_is_smallest_batch_of_a_bucket():
    buckets = (1, 8, 16)
    assert padded_batch(1, buckets) is None
    assert padded_batch(8, buckets) == 2
    assert padded_batch(16, buckets) == 9
    assert padded_batch(2, (1, 2)) is None
