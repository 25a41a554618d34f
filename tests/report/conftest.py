"""Synthetic run folders for report tests: result lines written by the test, numbers chosen so
that every derived figure can be recomputed by hand."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from dstbench.results.record import CaseResult, append_result

MIB = 2**20

# (method, kind, density, segment_ms, flops_per_step, state_bytes, activation_bytes, topology_ms)
CASES: list[tuple[str, str, float, list[float], int, int, int, float]] = [
    ("dense", "dense", 1.0, [200.0, 204.0, 196.0, 202.0, 198.0], 10_000_000_000, 40 * MIB, 60 * MIB, 0.0),
    ("rigl", "masked", 0.5, [110.0, 112.0, 108.0, 111.0, 109.0], 10_000_000_000, 48 * MIB, 60 * MIB, 20.0),
    ("rigl", "masked", 0.1, [100.0, 102.0, 98.0, 101.0, 99.0], 10_000_000_000, 44 * MIB, 60 * MIB, 25.0),
    ("barter", "compact", 0.5, [80.0, 82.0, 78.0, 81.0, 79.0], 5_000_000_000, 20 * MIB, 30 * MIB, 8.0),
    ("barter", "compact", 0.1, [40.0, 42.0, 38.0, 41.0, 39.0], 2_000_000_000, 4 * MIB, 12 * MIB, 10.0),
]
FAILED: list[tuple[str, str, float, str, str]] = [
    ("set", "masked", 0.1, "oom", "Traceback (most recent call last):\n  ...\ntorch.OutOfMemoryError: CUDA out of memory"),
    ("chase", "masked", 0.5, "error", "Traceback (most recent call last):\n  ...\nValueError: density went negative"),
]
TOPOLOGY = [
    {"step": 100, "heads": [8, 8, 8, 8], "hidden": [512, 512, 512, 512]},
    {"step": 200, "heads": [6, 5, 4, 4], "hidden": [300, 260, 200, 180]},
    {"step": 300, "heads": [4, 3, 2, 2], "hidden": [120, 100, 60, 40]},
]
ENV = {
    "device_type": "cuda", "device_name": "NVIDIA L40S", "torch": "2.5.0", "python": "3.11.7", "cuda": "12.4",
    "driver": "550.54", "commit": "0123456789abcdef0123456789abcdef01234567", "dirty": False,
    "gpu_before": {"sm_clock_mhz": 2520, "max_sm_clock_mhz": 2520, "mem_clock_mhz": 9001, "temperature_c": 41,
                   "power_w": 80.0, "power_limit_w": 350.0, "throttle_reasons": []},
    "gpu_after": {"sm_clock_mhz": 2490, "max_sm_clock_mhz": 2520, "mem_clock_mhz": 9001, "temperature_c": 63,
                  "power_w": 300.0, "power_limit_w": 350.0, "throttle_reasons": ["SwPowerCap"]},
}


def result_line(suite: str, method: str, kind: str, density: float, **fields: Any) -> CaseResult:
    return CaseResult(
        suite=suite, suite_hash="abc123", case_id=f"{method}@{density:g}", method=method, method_name=method,
        kind=kind, density=density, params=fields.pop("params", {}), device="cuda:0", batch_size=32,
        segment_steps=20, env=dict(ENV), **fields,
    )


PEAK_OVERHEAD = 8 * MIB  # allocator peak = state + activations + this, when the fixture has a peak


def ok_line(suite: str, method: str, kind: str, density: float, segments: list[float], flops: int, state: int,
            act: int, topo_ms: float, scale: float = 1.0, peak: bool = False, **extra: Any) -> CaseResult:
    segments = [s * scale for s in segments]
    ordered = sorted(segments)
    median = ordered[len(ordered) // 2]
    extras = {"topology_history": TOPOLOGY} if kind == "compact" else {}
    return result_line(
        suite, method, kind, density, segment_ms=segments, median_ms=median,
        iqr_ms=ordered[3] - ordered[1], images_per_s=32 * 20 / (median / 1e3), state_bytes=state,
        state_breakdown={"parameters": state // 4, "gradients": state // 4, "optimizer_state": state // 2,
                         "method_buffers": 0, "total": state},
        activation_bytes=act, flops_per_step=flops, density_achieved=density, topology_ms=topo_ms,
        topology_updates=1 if topo_ms else 0, method_extras=extras,
        peak_memory_bytes=state + act + PEAK_OVERHEAD if peak else None, **extra,
    )


def write_run(root: Path, name: str, lines: list[CaseResult], *, suite: dict[str, Any] | None = None,
              created: str = "2026-01-02T03:04:05+00:00") -> Path:
    run_dir = root / name
    run_dir.mkdir(parents=True)
    suite = suite or {"name": lines[0].suite, "reference": "rigl", "methods": sorted({line.method for line in lines})}
    (run_dir / "suite.yaml").write_text("# as validated\n" + yaml.safe_dump(suite, sort_keys=False))
    meta = {"suite": suite["name"], "suite_hash": "abc123", "created": created, "commit": ENV["commit"], "dirty": False}
    (run_dir / "run.json").write_text(json.dumps(meta))
    for line in lines:
        append_result(run_dir, line)
    return run_dir


def synthetic_lines(suite: str = "synthetic", scale: float = 1.0, peak: bool = False) -> list[CaseResult]:
    lines = [ok_line(suite, *case, scale=scale, peak=peak) for case in CASES]
    for method, kind, density, status, error in FAILED:
        lines.append(result_line(suite, method, kind, density, status=status, error=error, duration_s=3.5))
    return lines


@pytest.fixture
def synthetic_run(tmp_path: Path) -> Path:
    """dense, RigL and BARTER at two densities (reference RigL), one oom and one error case."""
    return write_run(tmp_path, "synthetic-20260102-030405", synthetic_lines())


HOSTILE = "<script>alert('x')</script>"


def hostile_run(root: Path) -> Path:
    """A run whose suite name, method label, parameter and device name hold markup."""
    suite = f"suite {HOSTILE}"
    lines = synthetic_lines(suite)
    for line in lines:
        if line.method == "barter":
            line.method = f"barter {HOSTILE}"
            line.params = {"note": HOSTILE}
        line.env = {**line.env, "device_name": f"GPU {HOSTILE}"}
    curve = [{"epoch": e, "step": 10 * e, "top1": 0.2 + 0.1 * e, "top5": 0.5 + 0.1 * e, "train_loss": 2.0 - 0.3 * e} for e in (1, 2, 3)]
    for line in lines:
        if line.status == "ok":
            line.top1, line.top5, line.epochs, line.curve = curve[-1]["top1"], curve[-1]["top5"], 3, curve
    spec = {"name": suite, "reference": "rigl", "densities": [0.1, 0.5],
            "methods": ["dense", "rigl", {"name": "barter", "label": f"barter {HOSTILE}", "params": {"note": HOSTILE}}],
            "expect": [{"metric": "density_achieved", "method": "*", "tolerance": 0.01}]}
    return write_run(root, "hostile-20260103-000000", lines, suite=spec)


@pytest.fixture(scope="session")
def report_html(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One HTML report of the hostile run (with accuracy curves), rendered once per session."""
    from dstbench.cli import main

    import contextlib
    import io

    root = tmp_path_factory.mktemp("report")
    run_dir = hostile_run(root)
    out = root / "report.html"
    stdout = io.StringIO()
    with contextlib.redirect_stdout(stdout):
        assert main(["report", str(run_dir), "--html", str(out)]) == 0
    (root / "stdout.txt").write_text(stdout.getvalue(), encoding="utf-8")
    return out


@pytest.fixture(scope="session")
def published_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A site of two runs of one suite (the newer one faster), published in one command."""
    from dstbench.cli import main

    root = tmp_path_factory.mktemp("site")
    older = write_run(root / "runs", "synthetic-20260101-120000", synthetic_lines(scale=1.2), created="2026-01-01T12:00:00+00:00")
    newer = write_run(root / "runs", "synthetic-20260105-120000", synthetic_lines(), created="2026-01-05T12:00:00+00:00")
    site = root / "site"
    assert main(["publish", str(newer), str(older), "--site", str(site)]) == 0
    return site
