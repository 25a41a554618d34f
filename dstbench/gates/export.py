"""A run in pytest-benchmark's JSON format (`export_run`), for `dstbench export RUN_DIR
--pytest-benchmark FILE` (the command: `dstbench.cli.export`).

One benchmark per ok case. A timed segment is one pytest-benchmark round of `segment_steps`
iterations, so the stats are per training step in seconds, computed by pytest-benchmark's own
`Stats` class from the raw segment samples (the same figures `pytest-benchmark compare` and its
histograms would compute). Everything else in the result line goes to `extra_info`.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

from dstbench.suite.cases import case_id as make_case_id, line_keys
from dstbench.util.extras import require
from dstbench.results.record import segment_samples
from dstbench.results.run_folder import RunFolder
from dstbench.util.files import SUITE_FILE


def benchmark_stats(segment_ms: list[float], segment_steps: int) -> dict[str, Any]:
    """pytest-benchmark's `stats` block: per-step seconds of each segment, `iterations` steps each."""
    require("dstbench export", "pytest_benchmark")  # an extra: pip install 'dstbench[export]'
    from pytest_benchmark.stats import Stats

    stats = Stats()
    for ms in segment_ms:
        stats.update(float(ms) / 1e3 / segment_steps)
    block = stats.as_dict()
    block["data"] = list(stats.data)
    block["iterations"] = segment_steps
    return block


def benchmark_entry(line: dict[str, Any], suite_path: str, name: str | None = None) -> dict[str, Any]:
    """One result line as one benchmark: `suite::method@density`, grouped by suite. `name`: the
    case's name there, by default its case id (with a suite's `seeds:`, its key: `rigl@0.1 seed=1`)."""
    case_id = name or line.get("case_id") or make_case_id(line["method"], line["density"])
    steps = int(line.get("segment_steps") or 1)
    device_type = (line.get("env") or {}).get("device_type") or str(line.get("device") or "").split(":")[0]
    return {
        "group": line.get("suite"),
        "name": f"{line.get('suite')}[{case_id}]",
        "fullname": f"{suite_path}::{line.get('suite')}[{case_id}]",
        "params": {"method": line.get("method"), "density": line.get("density")},
        "param": case_id,
        "extra_info": {k: v for k, v in line.items() if k != "segment_ms"},
        "options": {
            "disable_gc": False,
            # The device's own clock: CUDA events on a GPU, perf_counter on the CPU.
            "timer": "cuda_event" if device_type == "cuda" else "perf_counter",
            "min_rounds": len(line["segment_ms"]),
            "max_time": None,
            "min_time": None,
            "warmup": True,  # every dstbench case runs warmup steps before its timed segments
        },
        "stats": benchmark_stats(line["segment_ms"], steps),
    }


def _system(platform_string: str) -> tuple[str, str]:
    # dstbench records platform.platform(), e.g. "Linux-6.1.0-x86_64-with-glibc2.36".
    parts = platform_string.split("-")
    return (parts[0], parts[1]) if len(parts) > 1 else (platform_string, "")


def machine_info(env: dict[str, Any]) -> dict[str, Any]:
    """pytest-benchmark's machine_info keys, filled from the dstbench environment record."""
    system, release = _system(str(env.get("platform") or ""))
    return {
        "node": env.get("hostname") or "",
        "processor": env.get("cpu_model") or "",
        "machine": env.get("device_name") or "",
        "python_compiler": "",
        "python_implementation": env.get("python_implementation") or "",
        "python_implementation_version": env.get("python") or "",
        "python_version": env.get("python") or "",
        "python_build": [],
        "release": release,
        "system": system,
        "cpu": {"brand_raw": env.get("cpu_model") or "", "count": env.get("cpu_count")},
        # Not pytest-benchmark's: what dstbench's gates compare (device, GPU, torch, CUDA, driver).
        "dstbench": {k: env.get(k) for k in ("device_type", "device_name", "torch", "cuda", "driver", "timm")},
    }


def _pytest_benchmark_version() -> str:
    import pytest_benchmark

    return str(pytest_benchmark.__version__)


def export_run(run_dir: str | Path) -> tuple[dict[str, Any], list[str]]:
    """The pytest-benchmark document of a run, and the case ids left out (not ok, no samples)."""
    run_dir = Path(run_dir)
    folder = RunFolder.open(run_dir)
    meta = folder.meta
    suite_path = str(meta.get("suite_path") or run_dir / SUITE_FILE)
    benchmarks, skipped, env = [], [], {}
    lines = folder.lines()
    for line, name in zip(lines, line_keys(lines)):  # each seed its own benchmark
        # A case with a null (NaN) sample is left out whole: its rounds would not be its segments.
        samples = segment_samples(line.get("segment_ms"))
        if line.get("status") != "ok" or len(samples) != len(line.get("segment_ms") or []) or not samples:
            skipped.append(f"{name} ({line.get('status')})")
            continue
        env = env or dict(line.get("env") or {})
        benchmarks.append(benchmark_entry(line, suite_path, name))
    document = {
        "machine_info": machine_info(env),
        "commit_info": {
            "id": meta.get("commit") or "unversioned",
            "time": meta.get("commit_time"),
            "author_time": None,
            "dirty": bool(meta.get("dirty")),
            "project": "dstbench",
            "branch": meta.get("branch") or "(unknown)",
        },
        "benchmarks": benchmarks,
        "datetime": meta.get("created") or dt.datetime.now(dt.timezone.utc).isoformat(),
        "version": _pytest_benchmark_version(),
    }
    return document, skipped
