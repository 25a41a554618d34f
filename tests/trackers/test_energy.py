"""The NVML energy tracker: the not-measured reasons and, with a fake counter, the arithmetic and the
resolution rule."""

from __future__ import annotations

import pytest
import torch

from dstbench.measure import nvml
from dstbench.measure.trackers import energy


def fake_counter(monkeypatch: pytest.MonkeyPatch, readings_mj: list[int | None], times_s: list[float]) -> energy.EnergyMeter:
    """An EnergyMeter on a pretend GPU whose counter and clock return the given readings in turn."""
    readings, times = iter(readings_mj), iter(times_s)
    monkeypatch.setattr(nvml, "available", lambda: True)
    monkeypatch.setattr(nvml, "total_energy_mj", lambda index: next(readings))
    monkeypatch.setattr(nvml, "index_of", lambda device: 3)
    return energy.EnergyMeter(torch.device("cuda", 0), clock=lambda: next(times))


def test_cpu_device_is_not_measured() -> None:
    with energy.EnergyMeter(torch.device("cpu")) as meter:
        pass
    out = meter.result(steps=10, images=80)
    assert out["measured"] is False
    assert "cpu" in out["reason"]


def test_without_nvml_a_gpu_is_not_measured(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(nvml, "available", lambda: False)
    with energy.EnergyMeter(torch.device("cuda", 0)) as meter:
        pass
    out = meter.result(steps=10, images=80)
    assert out == {"measured": False, "reason": "NVML not available (no NVIDIA driver or nvidia-ml-py)"}


def test_joules_per_step_and_images_per_joule(monkeypatch: pytest.MonkeyPatch) -> None:
    meter = fake_counter(monkeypatch, [1_000_000, 1_450_000], [10.0, 13.0])
    with meter:
        pass
    out = meter.result(steps=100, images=3200)
    assert out["measured"] is True
    assert out["nvml_index"] == 3
    assert out["joules"] == pytest.approx(450.0)
    assert out["seconds"] == pytest.approx(3.0)
    assert out["joules_per_step"] == pytest.approx(4.5)
    assert out["images_per_joule"] == pytest.approx(3200 / 450)
    assert out["mean_power_w"] == pytest.approx(150.0)


def test_a_window_shorter_than_the_resolution_is_not_measured(monkeypatch: pytest.MonkeyPatch) -> None:
    meter = fake_counter(monkeypatch, [5_000, 80_000], [0.0, energy.MIN_WINDOW_S * 0.75])
    with meter:
        pass
    out = meter.result(steps=20, images=640)
    assert out["measured"] is False
    assert "1.50 s" in out["reason"] and "resolution" in out["reason"]


def test_the_resolution_rule_is_inclusive_at_the_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    meter = fake_counter(monkeypatch, [0, 2_000], [0.0, energy.MIN_WINDOW_S])
    with meter:
        pass
    assert meter.result(steps=1, images=1)["measured"] is True


def test_a_counter_that_does_not_advance_is_not_measured(monkeypatch: pytest.MonkeyPatch) -> None:
    meter = fake_counter(monkeypatch, [7_000, 7_000], [0.0, 5.0])
    with meter:
        pass
    out = meter.result(steps=20, images=640)
    assert out["measured"] is False
    assert "did not advance" in out["reason"]


def test_an_unreadable_counter_is_not_measured(monkeypatch: pytest.MonkeyPatch) -> None:
    meter = fake_counter(monkeypatch, [None], [0.0, 5.0])
    with meter:
        pass
    out = meter.result(steps=20, images=640)
    assert out["measured"] is False
    assert "not readable" in out["reason"]
