"""benchmarks/profile_step.py's timeline: where a profiled step leaves the GPU idle between kernels."""

from types import SimpleNamespace

import pytest
import torch

from benchmarks.profile_step import short_name, tally, timeline


def test_overlap_counts_once_and_each_gap_goes_to_the_kernels_around_it():
    kernels = [  # two steps of three kernels; under PDL b starts before a ends
        (0.0, 10.0, "a"), (8.0, 20.0, "b"), (23.0, 30.0, "c"),  # 3 us idle between b and c
        (31.0, 40.0, "a"), (39.0, 50.0, "b"), (52.0, 60.0, "c"),  # 1 us (c -> a), 2 us (b -> c)
    ]  # fmt: skip
    found = timeline(kernels, calls=2)
    assert found["span_us"] == 30.0  # 60 us over two steps
    assert found["idle_us"] == 3.0  # 3 + 1 + 2 = 6 us over two steps
    assert found["busy_us"] == 27.0  # the sum of durations would say 30.5: the overlap counted twice
    assert found["idle_before"] == [["b -> c", 2.5, 1.0], ["c -> a", 0.5, 0.5]]


def test_a_kernel_inside_a_longer_one_neither_idles_nor_takes_the_gap():
    found = timeline([(0.0, 10.0, "long"), (2.0, 4.0, "short"), (12.0, 13.0, "next")], calls=1)
    assert (found["busy_us"], found["idle_us"]) == (11.0, 2.0)
    assert found["idle_before"] == [["long -> next", 2.0, 1.0]]  # the kernel that ended last before the gap


def test_nothing_profiled_is_no_idle():
    assert timeline([], calls=5) == {"span_us": 0.0, "busy_us": 0.0, "idle_us": 0.0, "idle_before": []}


@pytest.mark.parametrize(
    ("name", "short"),
    [
        (
            "void at::native::(anonymous namespace)::indexSelectSmallIndex<c10::BFloat16, long>(x)",
            "indexSelectSmallIndex",
        ),
        ("skinny_kernel", "skinny_kernel"),
        ("nvjet_sm90_tst_384x8_64x4_2x1_v_bz_TNT", "nvjet_sm90_tst_384x8_64x4_2x1_v_bz_TNT"),
    ],
)
def test_kernel_names_are_shortened_for_the_idle_lines(name, short):
    assert short_name(name) == short


def test_tally_reads_the_device_kernels_and_their_timeline():
    cuda, cpu = torch.autograd.DeviceType.CUDA, torch.autograd.DeviceType.CPU

    def event(name, start, end, device=cuda):
        return SimpleNamespace(
            name=name, device_type=device, device_time=end - start, time_range=SimpleNamespace(start=start, end=end)
        )

    events = [event("skinny_kernel", 0, 5), event("Memcpy DtoD", 5, 9), event("triton_poi_fused_0", 7, 8)]
    events += [event("aten::mm", 0, 100, device=cpu)]
    found = tally(SimpleNamespace(events=lambda: events), calls=1)
    assert found["kernels"] == 2 and found["kernel_us"] == 6.0  # the copy and the host event left out
    assert (found["busy_us"], found["idle_us"]) == (6.0, 2.0)
    assert found["idle_before"] == [["skinny_kernel -> triton_poi_fused_0", 2.0, 1.0]]
