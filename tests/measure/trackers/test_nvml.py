"""Without a driver every NVML helper answers None instead of raising."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from dstbench.measure import nvml


@pytest.mark.skipif(nvml.available(), reason="this machine has NVML")
def test_without_nvml_everything_is_none() -> None:
    assert nvml.handle(0) is None
    assert nvml.snapshot(0) is None
    assert nvml.driver_version() is None
    assert nvml.total_energy_mj(0) is None


@pytest.mark.parametrize("raw", ["6ac4e3b1-0000-4a1b-9c2d-0123456789ab", "GPU-6ac4e3b1-0000-4a1b-9c2d-0123456789ab"])
def test_the_gpu_uuid_is_written_as_nvidia_smi_prints_it(raw: str, monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda index: SimpleNamespace(uuid=raw))
    assert nvml.gpu_uuid(0) == "GPU-6ac4e3b1-0000-4a1b-9c2d-0123456789ab"

