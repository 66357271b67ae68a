"""The tier list's patterns (tiers.py): `*` is the only wildcard, and `keep` takes node ids back."""

import tiers
from tiers import Exhaustive


def test_a_star_matches_any_run_and_brackets_are_literal():
    entry = Exhaustive("tests/a.py::test_x[*]", "why")
    assert entry.matches("tests/a.py::test_x[bf16-1]") and entry.matches("tests/a.py::test_x[]")
    assert not entry.matches("tests/a.py::test_x") and not entry.matches("tests/a.py::test_xy[1]")
    assert not Exhaustive("tests/a.py::test_x[b]", "why").matches("tests/a.py::test_xb")  # not a character class


def test_kept_node_ids_stay_in_the_fast_tier():
    entry = Exhaustive("tests/a.py::test_x[*]", "why", keep=("*-1]", "*[llama]"))
    assert not entry.matches("tests/a.py::test_x[bf16-1]") and not entry.matches("tests/a.py::test_x[llama]")
    assert entry.matches("tests/a.py::test_x[bf16-17]") and entry.matches("tests/a.py::test_x[qwen2]")


def test_every_entry_says_why_and_matches_within_one_test_file():
    for entry in tiers.EXHAUSTIVE:
        assert entry.why.strip(), entry.pattern
        assert entry.pattern.startswith("tests/") and ".py::" in entry.pattern, entry.pattern


def test_unmatched_names_the_entries_no_collected_test_falls_under():
    first = tiers.EXHAUSTIVE[0]
    assert first not in tiers.unmatched([first.pattern.replace("*", "x")])
    assert first in tiers.unmatched(["tests/elsewhere.py::test_nothing"])
