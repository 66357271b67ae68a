"""benchmarks/whole_step_sweep.py's inputs: step_sweep.py's trial logs read back into configs, and the
shipped table read with entries replaced for a capture (accelerate_graph.fused.kernels.configs)."""

import sys
from pathlib import Path

import pytest

from accelerate_graph.fused.kernels import configs
from accelerate_graph.fused.kernels.configs import SkinnyConfig

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

from kernel_sweep import describe, parse_described, rows_grid_in_a_step, wide_one_row_grid  # noqa: E402
from whole_step_sweep import NAMES, fastest_in_log  # noqa: E402


def test_every_described_config_reads_back():
    grids = rows_grid_in_a_step(16, 4864) + wide_one_row_grid(896) + [SkinnyConfig(2, 512, 8, 3)]
    assert [parse_described(describe(cfg)) for cfg in grids] == grids
    with pytest.raises(ValueError, match="not a described config"):
        parse_described("n64 k128 w4 s4 swap")


def test_each_op_keeps_its_fastest_configs_from_a_trial_log():
    log = "gate_up\tn64 k128 w4 s4 x1 swap\t43.3\ngate_up\tn64 k256 w4 s3 x1 dot\t39.8\n\no\tn16 k128 w4 s3 x1 dot\t30.0\n"
    found = fastest_in_log(log, top=1)
    assert found == {"gate_up": [SkinnyConfig(64, 256, 4, 3, dot=True)], "o": [SkinnyConfig(16, 128, 4, 3, dot=True)]}


@pytest.mark.parametrize("log", sorted((BENCHMARKS / "trials").glob("step-trials-*.tsv")), ids=lambda p: p.name)
def test_the_kept_trial_logs_read(log):
    found = fastest_in_log(log.read_text(encoding="utf-8"), top=8)
    assert set(found) <= set(NAMES) and found
    assert all(1 <= len(cfgs) <= 8 for cfgs in found.values())


def test_entries_replaced_for_the_duration_only():
    key = configs.table_key("residual", 16, (896,), 896)
    was = configs.config_for("residual", 16, (896,), 896)
    other = SkinnyConfig(32, 64, 8, 2, dot=True)
    assert other != was
    with configs.entries_replaced({key: other}):
        assert configs.config_for("residual", 9, (896,), 896) == other  # 9 rows: the 16-row bucket
    assert configs.config_for("residual", 16, (896,), 896) == was
    with pytest.raises(RuntimeError), configs.entries_replaced({key: other}):
        raise RuntimeError("a capture failed")
    assert configs.config_for("residual", 16, (896,), 896) == was  # restored after a failure too


def test_both_sweeps_key_their_ops_by_the_row_bucket():
    from step_sweep import OpShapes

    class Sweep(OpShapes):
        rows, shapes = 9, {"o": ("residual", (896,), 896)}

    assert Sweep().key("o") == "residual|m16|n896|k896"
    assert Sweep().table_config("o") == configs.config_for("residual", 16, (896,), 896)
