"""benchmarks/profile_step.py's ways: each a change of settings from the run's own, by registry names."""

import argparse

import pytest

from accelerate_graph import settings
from benchmarks.profile_step import WAYS, batch_sizes, settings_given, way_settings, ways_named


@pytest.mark.parametrize("name", [name for name, way in WAYS.items() if way.changes])
def test_each_way_changes_exactly_its_settings_from_the_base(name):
    base = settings.DEFAULTS.replace(debug=True)  # what --set or the environment made of the run
    changed = way_settings(name, base)
    differing = {key for key, value in changed.as_dict().items() if value != base.as_dict()[key]}
    assert differing == {setting for setting, _ in WAYS[name].changes}
    assert WAYS[name].fuse and WAYS[name].attn == "grouped"


def test_the_plain_ways_run_the_base_as_it_is():
    base = settings.DEFAULTS.replace(skinny_batches="proj,gate_up")
    assert way_settings("fused", base) == base and way_settings("graph", base) == base
    assert not WAYS["graph"].fuse and WAYS["graph"].attn == "sdpa"


def test_ways_are_named_in_order_and_an_unknown_one_is_one_clear_error():
    assert ways_named("fused-no-pdl, graph") == ["fused-no-pdl", "graph"]
    with pytest.raises(argparse.ArgumentTypeError, match="no way fused-fold-combine; ways: graph, fused"):
        ways_named("fused,fused-fold-combine")


def test_batches_are_whole_numbers_and_a_bad_list_is_one_clear_error():
    assert batch_sizes("8,1,32") == (1, 8, 32)
    with pytest.raises(argparse.ArgumentTypeError, match="--batches"):
        batch_sizes("1,x")


def test_a_bad_setting_ends_the_run_with_its_line_and_exit_2(capsys):
    parser = argparse.ArgumentParser(prog="profile_step.py")
    assert settings_given(parser, ["pdl=off"]).pdl is False
    with pytest.raises(SystemExit) as ended:
        settings_given(parser, ["pdl=maybe"])
    assert ended.value.code == 2
    assert "sets pdl to 'maybe'" in capsys.readouterr().err.splitlines()[-1]
