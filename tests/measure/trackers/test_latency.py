from __future__ import annotations

import time

import pytest
import torch

from dstbench.measure.clock import SegmentTimer
from dstbench.measure.trackers import summarize_ms


def test_cpu_timer_measures_a_known_sleep_within_ten_percent() -> None:
    with SegmentTimer(torch.device("cpu")) as timer:
        time.sleep(0.25)
    assert timer.elapsed_ms == pytest.approx(250, rel=0.10)


def test_timer_leaves_no_time_after_an_exception() -> None:
    with pytest.raises(RuntimeError):
        with SegmentTimer(torch.device("cpu")) as timer:
            raise RuntimeError("boom")
    assert timer.elapsed_ms is None


def test_summary_is_median_and_interquartile_range() -> None:
    assert summarize_ms([4.0, 1.0, 3.0, 2.0, 100.0]) == (3.0, 2.0)


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_timer_uses_events() -> None:
    with SegmentTimer(torch.device("cuda")) as timer:
        torch.cuda._sleep(10_000_000)
    assert timer.elapsed_ms is not None and timer.elapsed_ms > 0
