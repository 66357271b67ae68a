"""The memory preflight and the stated bound, on real-size configs (never instantiated) and tiny models."""

from __future__ import annotations

import pytest
import torch

from accelerate_graph.common.errors import ResourceError
from accelerate_graph.core import preflight as preflight_module
from accelerate_graph.core.memory import GIB, Geometry, request_need
from accelerate_graph.core.preflight import preflight
from accelerate_graph.models.loading import recipe_config
from accelerate_graph.models.recipes import find_recipe

CUDA = torch.device("cuda")


def phi3():
    return recipe_config(find_recipe("phi-3-mini-4k"))


def with_free(monkeypatch, nbytes: int) -> None:
    monkeypatch.setattr(preflight_module, "free_bytes", lambda device: (nbytes, "test"))


def test_phi3_cache_of_32_rows_and_4096_slots_is_51_gb():
    geometry = Geometry.of(phi3())
    # 2 (K, V) x 32 layers x 32 KV heads x 96 dims x 32 rows x 4097 slots (one spare) x 2 bytes
    assert geometry.kv_bytes(32, 4097, torch.bfloat16) == 2 * 32 * 32 * 96 * 32 * 4097 * 2 == 51_552_190_464


def test_phi3_batch_32_at_4096_fits_an_h200_beside_its_weights(monkeypatch):
    """Phi-3-mini at batch 32 and cache 4096 on an H200: 141 GB, 7.6 GB of weights. The need beyond the weights must be one
    cache and change, not the three or four caches the old snapshots made."""
    with_free(monkeypatch, 140 * 10**9 - 7_642_000_000)
    line = preflight(phi3(), torch.bfloat16, CUDA, (1, 8, 32), 4096, 128)
    assert line.startswith("memory preflight: needs")
    need = request_need(Geometry.of(phi3()), torch.bfloat16, 32, 4096, 128, fuse=True).total
    assert 51.5e9 < need < 70e9


def test_a_request_that_cannot_fit_names_what_would(monkeypatch):
    geometry = Geometry.of(phi3())
    free = 40 * GIB
    with_free(monkeypatch, free)
    with pytest.raises(ResourceError) as err:
        preflight(phi3(), torch.bfloat16, CUDA, (1, 8, 32), 4096, 128)
    message = str(err.value)
    assert "batch 32 at cache 4096 needs" in message and "40.00 GiB is free" in message
    batch = int(message.split("batch buckets up to ")[1].split()[0])
    length = int(message.split("max_cache_len=")[-1].split()[0])

    def need(b, n):
        return request_need(geometry, torch.bfloat16, b, n, 128, False).total

    assert need(batch, 4096) <= free < need(batch + 1, 4096)
    assert need(32, length) <= free < need(32, length + 256) and length % 256 == 0


def test_a_huge_bucket_gets_its_hint_at_once(monkeypatch):
    """`--buckets 100000000` hung: the hint tried every batch size down to 1. It bisects now."""
    import time

    geometry = Geometry.of(phi3())
    free = 40 * GIB
    with_free(monkeypatch, free)
    calls = []
    real = preflight_module.request_need
    monkeypatch.setattr(preflight_module, "request_need", lambda *a, **k: calls.append(a) or real(*a, **k))
    started = time.process_time()
    with pytest.raises(ResourceError) as err:
        preflight(phi3(), torch.bfloat16, CUDA, (1, 100_000_000), 4096, 128)
    assert time.process_time() - started < 5 and len(calls) < 100
    batch = int(str(err.value).split("batch buckets up to ")[1].split()[0])
    need = request_need(geometry, torch.bfloat16, batch, 4096, 128, False).total
    assert need <= free < request_need(geometry, torch.bfloat16, batch + 1, 4096, 128, False).total


def test_largest_fitting_is_the_last_that_fits():
    from accelerate_graph.core.preflight import largest_fitting

    for limit in (0, 1, 2, 7, 100, 10**9):
        assert largest_fitting(lambda n, limit=limit: n <= limit, 1, 10**9) == (limit or None)
    assert largest_fitting(lambda n: True, 5, 4) is None


def test_nothing_fits_says_so(monkeypatch):
    with_free(monkeypatch, 10**6)
    with pytest.raises(ResourceError, match="Not even batch 1 fits"):
        preflight(phi3(), torch.bfloat16, CUDA, (1, 8), 1024, 128)


def test_cpu_preflight_uses_host_memory_or_says_why_not():
    line = preflight(phi3(), torch.bfloat16, torch.device("cpu"), (1,), 256, 16)
    assert line.startswith(("memory preflight: needs", "memory preflight skipped:"))


def test_prepare_refuses_before_allocating_the_cache(monkeypatch):
    from accelerate_graph import pipeline

    with_free(monkeypatch, 1024)
    monkeypatch.setattr(pipeline, "DecodeSession", lambda *a, **k: pytest.fail("the cache was allocated"))
    with pytest.raises(ResourceError, match="What fits|Not even batch 1"):
        pipeline.prepare(pipeline.CaptureRequest(model="tiny", device="cpu", buckets=(1, 4)))


def test_capture_reports_its_memory_in_json(tmp_path):
    import json

    from typer.testing import CliRunner

    from cli.main import app

    plan = tmp_path / "p.yaml"
    result = CliRunner().invoke(
        app, ["capture", "tiny", "--device", "cpu", "--buckets", "1,2", "--plan", str(plan), "--json", "-"]
    )
    assert result.exit_code == 0, result.output
    memory = json.loads(result.stdout[result.stdout.index("{") :])["memory"]
    assert memory["peak_bytes"] is None  # not tracked on the CPU
    parts = memory["bound_parts_bytes"]
    assert {"weights", "KV cache", "graph pool", "activations", "margin"} <= set(parts)
    assert memory["bound_bytes"] == sum(parts.values())
    assert memory["preflight"]


def test_a_loading_peak_above_the_session_s_parts_is_a_part_of_the_bound():
    """Quantizing on load peaks before the session exists (bf16 layers beside FP8 ones): where that measured
    peak is above every later part, the bound says by how much; below them it adds nothing."""
    from tiny_models import tiny_decoder

    from accelerate_graph.core.decode_session import DecodeSession
    from accelerate_graph.core.memory import command_bound

    session = DecodeSession(tiny_decoder("llama"), 2, 64)
    plain = command_bound(session, 0, 8, 3, False)
    assert "loading, above the rest" not in plain.parts
    below = command_bound(session, 0, 8, 3, False, loading_peak=plain.total - plain.parts["margin"] - 1)
    assert below.parts == plain.parts
    high = plain.total + GIB
    above = command_bound(session, 0, 8, 3, False, loading_peak=high)
    assert above.total - above.parts["margin"] == high
    assert above.parts["loading, above the rest"] == high - (plain.total - plain.parts["margin"])
