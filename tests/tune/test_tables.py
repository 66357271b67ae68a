"""The skinny kernels' tuning tables are the GPU's: named by device, the user's entries over the shipped ones,
none (and one warning) for a GPU without either, and a lookup dynamo can trace."""

from __future__ import annotations

import json
import warnings

import pytest
import torch

from accelerate_graph.fused.kernels import configs
from accelerate_graph.fused.kernels.configs import SkinnyConfig
from accelerate_graph.tune.table import table_text

H200 = "NVIDIA H200"


@pytest.fixture(autouse=True)
def _own_cache(tmp_path, monkeypatch):
    """Each test with an empty user cache folder and tables read afresh (before and after)."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    configs.forget_tables()
    yield
    configs.forget_tables()


def write_user_table(device: str, entries: dict[str, SkinnyConfig]) -> None:
    path = configs.user_table_path(device)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(table_text(entries, device, {"torch": "test"}), encoding="utf-8")


def test_a_table_is_named_by_the_device_as_torch_reports_it():
    assert configs.table_file_name(H200) == "skinny-NVIDIA_H200.json"
    assert configs.table_file_name("NVIDIA GeForce RTX 4090/PCIe") == "skinny-NVIDIA_GeForce_RTX_4090_PCIe.json"
    assert configs.user_tables_dir({"XDG_CACHE_HOME": "/c"}).as_posix() == "/c/cugraph-accel/tuning"
    assert configs.user_tables_dir({}).as_posix().endswith(".cache/cugraph-accel/tuning")


def test_every_shipped_table_names_its_device_and_reads():
    shipped = sorted(configs.SHIPPED_DIR.glob("skinny-*.json"))
    assert [p.name for p in shipped] == ["skinny-NVIDIA_H200.json"]
    for path in shipped:
        body = json.loads(path.read_text(encoding="utf-8"))
        assert configs.table_file_name(body["device"]) == path.name
        assert set(body["swept_with"]) == {"torch", "triton"}
        assert configs.read_table(path)


def test_the_shipped_table_serves_its_device_and_no_other():
    with configs.use_device(H200):
        assert configs.in_table("proj", 1, (1152,), 896)  # Qwen2.5-0.5B's merged q/k/v
        assert configs.table_in_use() == configs.TableInUse(H200, "shipped", configs.shipped_table_path(H200))
    assert not configs.in_table("proj", 1, (1152,), 896)  # the CPU, no device named: no table
    assert configs.table_in_use().origin == "none"


def test_the_user_table_comes_first_and_keeps_the_shipped_entries_it_lacks():
    key = configs.table_key("proj", 1, (1152,), 896)
    mine = SkinnyConfig(8, 128, lookahead=True)
    write_user_table(H200, {key: mine, "residual|m8|n64|k64": SkinnyConfig(16, 64, dot=True)})
    shipped = configs.read_table(configs.shipped_table_path(H200))
    with configs.use_device(H200):
        assert configs.config_for("proj", 1, (1152,), 896) == mine != shipped[key]
        assert configs.in_table("residual", 5, (64,), 64)  # 5 rows: the 8-row bucket
        other = next(k for k in shipped if k != key)
        op, bucket, ns, k = other.split("|")
        assert configs.config_for(op, int(bucket[1:]), tuple(map(int, ns[1:].split("+"))), int(k[1:])) == shipped[other]
        found = configs.table_in_use()
    assert (found.origin, found.path, found.shipped) == (
        "user",
        configs.user_table_path(H200),
        configs.shipped_table_path(H200),
    )
    assert found.as_dict()["path"] == str(configs.user_table_path(H200))


def test_a_gpu_without_a_table_runs_inductors_kernels_and_says_so_once():
    with pytest.warns(UserWarning) as caught, configs.use_device("Unknown GPU 9000"):
        assert not configs.in_table("proj", 1, (1152,), 896)
        assert configs.config_for("residual", 1, (896,), 896) == configs.heuristic("residual", 1, (896,), 896)
        assert not configs.in_table("residual", 8, (896,), 896)
    assert [str(w.message) for w in caught] == [
        "no tuning table for Unknown GPU 9000: the fused step uses inductor's kernels; "
        "run `cugraph-accel tune MODEL` to make one"
    ]
    configs.forget_tables()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a second read of the same device's tables says nothing more
        with configs.use_device("Unknown GPU 9000"):
            assert not configs.in_table("proj", 1, (1152,), 896)
    found = configs.table_in_use("Unknown GPU 9000")
    from cli.bench_tables import tuning_table_line

    line = tuning_table_line(found.as_dict())  # what the bench header says
    assert found.origin == "none" and found.path is None and "inductor's kernels" in line


def test_a_table_written_later_serves_after_forget_tables():
    with pytest.warns(UserWarning), configs.use_device("Test GPU"):
        assert not configs.in_table("residual", 1, (64,), 64)
    write_user_table("Test GPU", {configs.table_key("residual", 1, (64,), 64): SkinnyConfig(8, 64)})
    with configs.use_device("Test GPU"):
        assert not configs.in_table("residual", 1, (64,), 64)  # read once a process, until told
        configs.forget_tables()
        assert configs.in_table("residual", 1, (64,), 64)


def test_an_unreadable_user_table_is_one_line_saying_what_to_do():
    path = configs.user_table_path("Test GPU")
    path.parent.mkdir(parents=True)
    path.write_text("{not json", encoding="utf-8")
    with pytest.raises(configs.TableError) as raised, configs.use_device("Test GPU"):
        configs.in_table("proj", 1, (64,), 64)
    message = str(raised.value)
    assert "\n" not in message and str(path) in message and "cugraph-accel tune MODEL --force" in message


def test_the_lookup_traces_under_dynamo_without_a_graph_break():
    """A compiled layer asks in_table while dynamo traces it: the table is read then (not a file stat traced)."""
    write_user_table("Test GPU", {configs.table_key("residual", 1, (64,), 64): SkinnyConfig(8, 64)})

    def step(x):
        if configs.in_table("residual", 1, (64,), 64):
            return x + configs.config_for("residual", 1, (64,), 64).block_n
        return x - 1

    torch._dynamo.reset()
    compiled = torch.compile(step, fullgraph=True, backend="eager")
    try:
        with configs.use_device("Test GPU"):
            assert compiled(torch.zeros(2)).tolist() == [8.0, 8.0]
        with pytest.warns(UserWarning, match="no tuning table"), configs.use_device("Other GPU"):
            assert compiled(torch.zeros(2)).tolist() == [-1.0, -1.0]  # another name: traced again, not reused
    finally:
        torch._dynamo.reset()
