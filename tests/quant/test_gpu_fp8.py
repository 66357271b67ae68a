"""FP8 weights on a CUDA GPU (skipped without one): an FP8 checkpoint loads onto the device as our layers with
the CPU emulation's logits (within bf16 rounding of the GPU's product), and plans captured with FP8 weights,
plain and fused (the layer program over the FP8 layers), verify against the FP8 model's own eager run; eval's
FP8 arm lies further from the bf16 model's float32 reference than bf16 eager."""

import pytest
import torch

from accelerate_graph import settings
from accelerate_graph.models.loading import load_model
from accelerate_graph.pipeline import CaptureRequest, prepare
from accelerate_graph.quant.fp8_linear import Fp8Linear
from accelerate_graph.quant.quantize import fp8_layers
from accelerate_graph.verify.against_eager import verify_graphs
from accelerate_graph.verify.cases import VERIFY

pytestmark = [pytest.mark.cuda, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]
GPU = torch.device("cuda:0")


def test_an_fp8_checkpoint_loads_onto_the_gpu_like_the_emulation(fp8_checkpoint_dir):
    on_gpu = load_model(fp8_checkpoint_dir, GPU, torch.bfloat16).model
    on_cpu = load_model(fp8_checkpoint_dir, torch.device("cpu"), torch.bfloat16).model
    layers = fp8_layers(on_gpu)
    assert layers and all(layer.weight.is_cuda and layer.scale.is_cuda for layer in layers)
    ids = torch.randint(0, 4096, (2, 9))
    with torch.no_grad():
        got = on_gpu(ids.to(GPU)).logits.float().cpu()
        expected = on_cpu(ids).logits.float()
    assert (got.argmax(-1) == expected.argmax(-1)).float().mean() > 0.9
    torch.testing.assert_close(got, expected, rtol=0.05, atol=0.1)


@pytest.mark.parametrize("scheme", ["fp8", "fp8-block"])
@pytest.mark.parametrize("fuse, fold", [(False, "auto"), (True, "auto"), (True, "off")])
def test_fp8_plans_verify_on_the_gpu(trained_tiny, tmp_path, scheme, fuse, fold):
    """fp8_fold auto (on CUDA): the fused plan's FP8 kernels fold the norms, residual adds and gate/up's
    activation in; off: the norms and adds are inductor's kernels around fp8_matmul."""
    request = CaptureRequest(model=trained_tiny, buckets=(1, 8), dtype="bf16", device="cuda", weights=scheme)
    request.max_cache_len, request.fuse = 256, fuse
    request.settings = settings.DEFAULTS.replace(fp8_fold=fold)
    request.inductor_cache = str(tmp_path / "inductor") if fuse else None
    prepared = prepare(request)  # the quick check after capture: the same criterion
    assert prepared.plan.weights == scheme and isinstance(prepared.session.model.model.layers[0].mlp.up_proj, Fp8Linear)
    if fuse:  # the layer program with the FP8 product; block scales: k/v's 64 rows and gate's 352 keep both apart
        kind = prepared.session.fused.layer_forward_kind()
        assert f"the layer program, merged, FP8 weights ({scheme}" in kind, kind
        assert ("q/k/v and gate/up kept apart" in kind) is (scheme == "fp8-block"), kind
    rows = verify_graphs(prepared.graphs, steps=8, prompt_len=9, coverage=VERIFY)
    assert rows and all(r.passed for r in rows), [r.detail for r in rows if not r.passed]


def test_eval_on_the_gpu_measures_fp8_further_from_the_reference_than_bf16(trained_tiny, tmp_path, monkeypatch):
    import json

    from typer.testing import CliRunner

    from cli.main import app

    monkeypatch.chdir(tmp_path)
    text, out = f"{trained_tiny}/held_out_sample.txt", tmp_path / "eval.json"
    args = ["eval", trained_tiny, "--text", text, "--windows", "8", "--dtype", "bf16", "--device", "cuda"]
    result = CliRunner().invoke(app, [*args, "--buckets", "1,8", "--weights", "fp8-block", "--json", str(out)])
    assert result.exit_code == 0, result.output
    arms = {arm["name"]: arm for arm in json.loads(out.read_text())["arms"]}
    assert arms["fp8-block"]["kl_mean"]["low"] > arms["eager"]["kl_mean"]["high"]
    assert arms["graph"]["passed"] is True and arms["fp8-block"]["passed"] is None


def test_quantizing_on_the_gpu_peaks_at_one_layer_above_the_bf16_weights():
    """Each bf16 layer goes as its FP8 layer replaces it, so quantizing never holds both models: the peak above
    what was held is one layer's float32 copies, not the FP8 weights of every layer (an 8B's verify peaked
    over its bound with both)."""
    from tiny_models import tiny_decoder

    from accelerate_graph.core.memory import peak_bytes, reset_peak
    from accelerate_graph.quant.quantize import quantize_model

    model = tiny_decoder("llama", hidden_size=1024, intermediate_size=4096, num_hidden_layers=8)
    model = model.to(GPU, torch.bfloat16)
    decoder = [m for name, m in model.named_modules() if type(m) is torch.nn.Linear and name != "lm_head"]
    largest = max(m.weight.numel() for m in decoder)
    fp8_bytes = sum(m.weight.numel() for m in decoder)  # one byte a weight
    del decoder  # a list of the layers would keep them
    reset_peak(GPU)
    held = torch.cuda.memory_allocated(GPU)
    quantize_model(model, "fp8")
    above = peak_bytes(GPU) - held
    assert fp8_bytes > 12 * largest  # the test tells the two apart
    assert above <= 12 * largest, f"{above / 2**20:.0f} MiB above the bf16 model while quantizing"
