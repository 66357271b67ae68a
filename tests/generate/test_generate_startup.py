"""`generate`'s road to its first token: a new process imports only what a plain (not --fuse, not --tp)
generate uses, and its --json says where the time went, stage by stage, from our first line on."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# Imported only where a request asks for them (--fuse, --tp, bench, verify's fault injection, zoo).
LAZY = (
    "accelerate_graph.distributed",
    "accelerate_graph.fused.layers",
    "accelerate_graph.fused.layer_program",
    "accelerate_graph.fused.gemv_lowering",
    "accelerate_graph.fused.kernels",
    "accelerate_graph.bench.run",
    "accelerate_graph.bench.timing",
    "accelerate_graph.bench.floor",
    "accelerate_graph.bench.compiled_step",
    "accelerate_graph.verify.faults",
    "accelerate_graph.zoo",
    "torch._inductor.compile_fx",  # inductor's compiler proper (dynamo's import brings only its config)
    "torch._inductor.graph",
    "cli.bench_tables",
)

# Runs the command as `python -m cli` does (cli.entry.main), then lists the modules it imported.
RUN_AND_LIST = """
import json, sys
import cli.entry
sys.argv = ["cugraph-accel", "generate", *json.loads(sys.argv[1])]
try:
    cli.entry.main()
except SystemExit as done:
    code = done.code
print(json.dumps({"code": code, "modules": sorted(sys.modules)}))
"""


def run_generate(args: list[str]) -> list[str]:
    """The modules a new process running `cugraph-accel generate ARGS` imported."""
    done = subprocess.run(
        [sys.executable, "-c", RUN_AND_LIST, json.dumps(args)],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=240,
    )
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["code"] in (0, None), done.stdout[-2000:] + done.stderr[-2000:]
    return result["modules"]


def test_a_plain_generate_imports_neither_fuse_nor_tp_nor_bench(tiny_model_dir, tmp_path):
    report = tmp_path / "out.json"
    args = [tiny_model_dir("qwen2"), "--input-ids", "5,6,7,8", "--max-new-tokens", "4", "--buckets", "1"]
    modules = run_generate([*args, "--max-cache-len", "32", "--device", "cpu", "--json", str(report)])
    assert "accelerate_graph.pipeline" in modules and "accelerate_graph.verify.against_eager" in modules  # it ran
    imported = [m for m in modules if any(m == lazy or m.startswith(lazy + ".") for lazy in LAZY)]
    assert imported == [], f"a plain generate imported {imported}: import them where they are used"

    stages = [stage for stage, _ in json.loads(report.read_text())["startup_unix"]]
    assert stages[:5] == ["python up", "command", "torch imported", "transformers imported", "imported"]
    assert stages[-1] == "first token" and "checking replay against eager" in stages
    times = [at for _, at in json.loads(report.read_text())["startup_unix"]]
    assert times == sorted(times)
    assert json.loads(report.read_text())["captures"][0]["bucket"] == 1


def test_the_cli_modules_generate_imports_before_its_command_stamp_import_no_torch():
    """The "command" stamp is taken once the line is parsed: everything before it (the app, --tp's
    module, generate's own) must not import torch, or the stamp would hide torch's import."""
    code = "import sys, cli.main, cli.tp, cli.common, cli.generate_cmd; sys.exit(int('torch' in sys.modules))"
    done = subprocess.run([sys.executable, "-c", code], env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, "a module generate imports before its first stamp imports torch"
