"""benchmarks/skinny_launches.py: what each skinny launch and each compiled variant reads back as."""

from types import SimpleNamespace

import torch

from accelerate_graph.fused.kernels import skinny_matmul
from benchmarks.skinny_launches import describe_variant, recording_launch


def test_a_variant_names_its_watched_constexprs_and_what_it_asks_of_a_multiprocessor():
    kernel = SimpleNamespace(arg_names=["x_ptr", "M", "K", "USE_PDL", "BLOCK_M", "RSTD_CHUNK"])
    variant = SimpleNamespace(
        src=SimpleNamespace(constants={(1,): 1, (3,): True, (4,): 16, (5,): 64}),  # RSTD_CHUNK: not watched
        metadata=SimpleNamespace(num_warps=4, num_stages=3, shared=16384, launch_pdl=True),
        n_regs=96,
        n_spills=0,
    )
    line = describe_variant(kernel, variant)
    assert (
        line == "M=1 USE_PDL=True BLOCK_M=16 num_warps=4 num_stages=3 shared=16384 launch_pdl=True n_regs=96 n_spills=0"
    )


def test_a_variant_without_what_is_read_says_so_instead_of_failing():
    assert describe_variant(SimpleNamespace(), SimpleNamespace()) == "n_regs=? n_spills=?"


def test_each_distinct_launch_is_recorded_once_with_its_count(monkeypatch):
    calls = []
    monkeypatch.setattr(skinny_matmul, "launch", lambda *args, **kwargs: calls.append(args) or ["out"])
    seen: dict = {}
    recorded = recording_launch(seen)
    x, w = torch.zeros(8, 64), torch.zeros(32, 64)
    for _ in range(3):
        assert recorded("proj", x, None, 0.0, "llama", [w], [None]) == ["out"]
    recorded("proj", x[:2], None, 0.0, "llama", [w], [None])
    assert len(calls) == 4
    assert sorted((key[0], key[1], count) for key, count in seen.items()) == [("proj", 2, 1), ("proj", 8, 3)]
    key = next(k for k in seen if k[1] == 8)
    assert key[2:4] == ((32,), 64) and "x:0/c" in key[5] and key[6] == "pdl=False"  # CPU: no PDL
