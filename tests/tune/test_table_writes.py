"""`tune` merges what it chose into a table: never losing an entry, never leaving half a file, and refusing
(without --force) to merge into a table it cannot read or that is another GPU's."""

from __future__ import annotations

import json

import pytest

from accelerate_graph.common.errors import BadOptionError, WriteError
from accelerate_graph.fused.kernels import configs
from accelerate_graph.fused.kernels.configs import SkinnyConfig
from accelerate_graph.tune import table

GPU = "Test GPU"
VERSIONS = {"torch": "2.13.0", "triton": "3.9.0"}
A, B = configs.table_key("residual", 1, (64,), 64), configs.table_key("proj", 8, (128,), 64)


def test_chosen_entries_merge_into_the_table_and_the_others_stay(tmp_path):
    path = tmp_path / "t.json"
    assert table.merge_into(path, {A: SkinnyConfig(8, 64)}, GPU, VERSIONS) == (1, 0)
    assert table.merge_into(path, {B: SkinnyConfig(16, 64, dot=True), A: SkinnyConfig(8, 64)}, GPU, VERSIONS) == (1, 0)
    assert table.merge_into(path, {A: SkinnyConfig(32, 64)}, GPU, VERSIONS) == (0, 1)
    assert configs.read_table(path) == {A: SkinnyConfig(32, 64), B: SkinnyConfig(16, 64, dot=True)}
    body = json.loads(path.read_text(encoding="utf-8"))
    assert body["device"] == GPU and body["swept_with"] == VERSIONS and body["written_by"] == "cugraph-accel tune"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.json"]  # no temp file left


def test_a_failed_write_leaves_the_old_table_whole(tmp_path, monkeypatch):
    path = tmp_path / "t.json"
    table.merge_into(path, {A: SkinnyConfig(8, 64)}, GPU, VERSIONS)
    before = path.read_text(encoding="utf-8")

    def full_disk(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("os.fsync", full_disk)
    with pytest.raises(WriteError, match="No space left"):
        table.merge_into(path, {B: SkinnyConfig(16, 64, dot=True)}, GPU, VERSIONS)
    assert path.read_text(encoding="utf-8") == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.json"]


def test_another_gpus_table_is_refused_unless_forced(tmp_path):
    path = tmp_path / "t.json"
    table.merge_into(path, {A: SkinnyConfig(8, 64)}, "Other GPU", VERSIONS)
    with pytest.raises(BadOptionError, match="a tuning table for Other GPU, not for Test GPU"):
        table.check_target(path, GPU, force=False)
    with pytest.raises(BadOptionError):
        table.merge_into(path, {B: SkinnyConfig(16, 64, dot=True)}, GPU, VERSIONS)
    table.check_target(path, GPU, force=True)
    assert table.merge_into(path, {B: SkinnyConfig(16, 64, dot=True)}, GPU, VERSIONS, force=True) == (1, 0)
    assert configs.read_table(path) == {B: SkinnyConfig(16, 64, dot=True)}  # the other GPU's entries replaced


def test_an_unreadable_table_is_refused_unless_forced(tmp_path):
    path = tmp_path / "t.json"
    path.write_text('{"device": "Test GPU", "entries": {"x": {"block_n": 8}}}', encoding="utf-8")
    with pytest.raises(configs.TableError, match="cannot be read"):
        table.check_target(path, GPU, force=False)
    assert table.merge_into(path, {A: SkinnyConfig(8, 64)}, GPU, VERSIONS, force=True) == (1, 0)
    assert configs.read_table(path) == {A: SkinnyConfig(8, 64)}


def test_a_folder_or_a_model_file_is_not_a_table_to_write(tmp_path):
    with pytest.raises(BadOptionError, match="it is a folder"):
        table.check_target(tmp_path, GPU, force=False)
    config = tmp_path / "config.json"
    config.write_text("{}", encoding="utf-8")
    with pytest.raises(BadOptionError, match="model file"):
        table.check_target(config, GPU, force=False)
