"""Our kernels compiled ahead (fused/kernels/ahead.py): launch sites warm instead of running while active."""

from __future__ import annotations

import pytest
import torch

from accelerate_graph.fused.kernels import ahead

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


class _Kernel:
    """Stands for a JIT kernel: records launches and warmups."""

    def __init__(self):
        self.calls = []

    def __getitem__(self, grid):
        return lambda *args, **kwargs: self.calls.append(("launch", grid, args, kwargs))

    def warmup(self, *args, grid, **kwargs):
        self.calls.append(("warmup", grid, args, kwargs))


def test_a_launch_runs_the_kernel_unless_compiling_ahead(monkeypatch):
    kernel = _Kernel()
    ahead.launcher(kernel, (3, 1))(1, 2, BLOCK=4)
    monkeypatch.setattr(ahead._state, "on", True, raising=False)
    ahead.launcher(kernel, (3, 1))(1, 2, BLOCK=4)
    assert kernel.calls == [("launch", (3, 1), (1, 2), {"BLOCK": 4}), ("warmup", (3, 1), (1, 2), {"BLOCK": 4})]


def test_a_traced_launch_goes_through_torchs_wrapper_and_never_warms(monkeypatch):
    kernel, wrapped = _Kernel(), []
    monkeypatch.setattr(torch.library, "wrap_triton", lambda k: wrapped.append(k) or k)
    monkeypatch.setattr(ahead._state, "on", True, raising=False)
    ahead.launcher(kernel, (2,), traced=True)(7)
    assert wrapped == [kernel] and kernel.calls == [("launch", (2,), (7,), {})]
    monkeypatch.setattr(ahead._state, "on", False)
    ahead.launcher(kernel, (2,))(7)  # a real launch: the kernel itself, the key its warmup compiled under
    assert wrapped == [kernel] and len(kernel.calls) == 2


def test_tensor_subclasses_are_traced_and_plain_tensors_are_not():
    class Tracing(torch.Tensor):  # stands for make_fx's fake and functional tensors
        pass

    assert not ahead.traced(torch.zeros(2))
    assert ahead.traced(torch.zeros(2).as_subclass(Tracing))


def test_compiling_ahead_is_on_inside_only_and_off_after_an_error():
    assert not ahead.active()
    with pytest.raises(ValueError):
        with ahead.compiling_ahead() as on:
            assert on and ahead.active()  # triton 3.9 has the async mode (compat test names it)
            raise ValueError("boom")
    assert not ahead.active()


def test_without_an_async_mode_nothing_compiles_ahead(monkeypatch):
    from accelerate_graph.compat import triton_internals

    monkeypatch.setattr(triton_internals, "async_compile_mode", lambda pool: None)
    kernel = _Kernel()
    with ahead.compiling_ahead() as on:
        assert not on and not ahead.active()
        ahead.launcher(kernel, (1,))()
    assert kernel.calls[0][0] == "launch"


@pytest.mark.cuda
@needs_cuda
def test_gpu_a_kernel_compiled_ahead_is_not_compiled_again_and_computes_right():
    import triton

    from accelerate_graph.fused.kernels import configs, skinny_matmul

    compiled = []
    knobs = triton.knobs.runtime
    was = knobs.jit_post_compile_hook
    knobs.jit_post_compile_hook = lambda *args, **kwargs: compiled.append(
        (str(kwargs.get("key"))[-300:], kwargs.get("is_manual_warmup"), kwargs.get("already_compiled"))
    )
    try:
        gen = torch.Generator(device="cuda").manual_seed(0)
        x = torch.randn(5, 320, device="cuda", generator=gen).to(torch.bfloat16)
        w = (torch.randn(208, 320, device="cuda", generator=gen) * 0.05).to(torch.bfloat16)
        cfg = configs.SkinnyConfig(16, 64, num_warps=2, num_stages=2, dot=True)  # a variant no other test runs
        with ahead.compiling_ahead() as on:
            assert on, "this Triton has no async compile mode: nothing compiles ahead"
            skinny_matmul.launch("proj", x, None, 0.0, "llama", [w], [None], cfg=cfg)
        ahead_count = len(compiled)
        (out,) = skinny_matmul.launch("proj", x, None, 0.0, "llama", [w], [None], cfg=cfg)
        torch.cuda.synchronize()
    finally:
        knobs.jit_post_compile_hook = was
    # the launch found it compiled (the message shows each compilation's key, warmup flag, cached flag)
    assert ahead_count >= 1 and len(compiled) == ahead_count, f"ahead {ahead_count}: {compiled}"
    torch.testing.assert_close(out.float(), (x.float() @ w.float().T), rtol=2e-2, atol=2e-2)


def test_the_fused_step_compiles_nothing_ahead_on_the_cpu_or_with_the_switch_off(monkeypatch):
    from tiny_models import tiny_decoder

    from accelerate_graph.fused.layers import FusedForward

    fused = FusedForward(tiny_decoder("llama"))
    for enabled in (False, True):
        monkeypatch.setattr(ahead, "ENABLED", enabled)
        with fused.compiling_ahead() as on:
            assert not on and not ahead.active()  # a CPU model: its ops never launch our kernels
