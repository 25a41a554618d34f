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


def fake_rapl(root, packages: dict[str, list[int]], wrap: int = 2**32):  # type: ignore[no-untyped-def]
    """A powercap folder whose package counters read the given values in turn."""
    readings = {}
    for name, values in packages.items():
        domain = root / name
        domain.mkdir(parents=True)
        (domain / "max_energy_range_uj").write_text(str(wrap))
        readings[domain / "energy_uj"] = iter(values)
        (domain / "energy_uj").write_text(str(values[0]))
    (root / "intel-rapl:0:0").mkdir()  # a sub-domain (cores): not a package, not summed
    return readings


def test_rapl_measures_the_cpu_packages_with_a_wrap(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    from dstbench.measure import rapl

    readings = fake_rapl(tmp_path, {"intel-rapl:0": [1_000_000, 1_000_000, 3_000_000],
                                    "intel-rapl:1": [4_294_000_000, 4_294_000_000, 500_000]})
    real = rapl._read_int
    monkeypatch.setattr(rapl, "_read_int", lambda path: next(readings[path]) if path in readings else real(path))
    times = iter([0.0, 0.5])
    with energy.EnergyMeter(torch.device("cpu"), clock=lambda: next(times), rapl_root=tmp_path) as meter:
        pass
    out = meter.result(steps=10, images=80)
    # 2 J on package 0; package 1 wrapped at 2**32 uJ: 4294967296 - 4294000000 + 500000 uJ.
    assert out["measured"] is True and out["rapl_packages"] == 2 and out["source"] == energy.RAPL_SOURCE
    assert out["joules"] == pytest.approx(2.0 + (2**32 - 4_294_000_000 + 500_000) / 1e6)
    assert energy.joules_per_step(out) == pytest.approx(out["joules"] / 10)
    assert energy.joules_per_step({"measured": False, "reason": "x"}) == "not measured"


def test_without_rapl_the_cpu_reason_says_where_it_looked(tmp_path) -> None:  # type: ignore[no-untyped-def]
    with energy.EnergyMeter(torch.device("cpu"), rapl_root=tmp_path / "absent") as meter:
        pass
    assert "RAPL" in meter.result(steps=1, images=1)["reason"]
