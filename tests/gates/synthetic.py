"""Synthetic run folders (run.json, suite.yaml, results.jsonl) written by hand, so the gates are
tested on exactly the samples and byte counts a test needs, in milliseconds."""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

import yaml

from dstbench.suite.cases import Case

from tests.conftest import micro_suite

SUITE_HASH = "0123456789abcdef"
CPU_ENV = {"device_type": "cpu", "device_name": "Test CPU", "torch": "2.14.1", "python": "3.11.7",
           "cpu_model": "Test CPU", "cpu_count": 2, "platform": "Linux-6.1.0-x86_64-with-glibc2.36"}
GPU_ENV = {**CPU_ENV, "device_type": "cuda", "device_name": "NVIDIA L40S", "cuda": "12.4"}

# Ten tight samples around 100 ms per segment (a quiet machine).
BASE_MS = [100.0, 101.2, 99.1, 100.6, 98.8, 100.3, 99.7, 101.0, 99.4, 100.9]


def scaled(samples: list[float], factor: float) -> list[float]:
    return [round(x * factor, 6) for x in samples]


def line(
    method: str,
    density: float,
    *,
    segment_ms: list[float] | None = None,
    state_bytes: int = 1_000_000,
    activation_bytes: int = 500_000,
    peak_memory_bytes: int | None = None,
    status: str = "ok",
    kind: str | None = None,
    density_achieved: float | None = None,
    suite_hash: str = SUITE_HASH,
    env: dict[str, Any] | None = None,
    **fields: Any,
) -> dict[str, Any]:
    """One result line with the fields the gates and reports read."""
    ok = status == "ok"
    segment_ms = list(BASE_MS if segment_ms is None else segment_ms) if ok else []
    return {
        "suite": "micro",
        "suite_hash": suite_hash,
        "case_id": f"{method}@{density:g}",
        "method": method,
        "method_name": fields.pop("method_name", "dense"),
        "kind": kind or ("dense" if density == 1.0 else "masked"),
        "params": fields.pop("params", {}),
        "density": density,
        "density_achieved": (density if density_achieved is None else density_achieved) if ok else None,
        "status": status,
        "error": None if ok else f"{status} in test",
        "device": (env or CPU_ENV)["device_type"],
        "segment_steps": 4,
        "segment_ms": segment_ms,
        "median_ms": statistics.median(segment_ms) if segment_ms else None,
        "iqr_ms": None,
        "images_per_s": None,
        "peak_memory_bytes": peak_memory_bytes if ok else None,
        "reserved_memory_bytes": None,
        "rss_peak_bytes": None,
        "state_bytes": state_bytes if ok else None,
        "activation_bytes": activation_bytes if ok else None,
        "flops_per_step": None,
        "topology_ms": 0.0 if ok else None,
        "top1": fields.pop("top1", None),
        "env": dict(env or CPU_ENV),
        **fields,
    }


def write_run(run_dir: Path, lines: list[dict[str, Any]], suite: dict[str, Any] | None = None) -> Path:
    """A run folder as `dstbench run` leaves it; `suite` defaults to the micro suite."""
    run_dir.mkdir(parents=True, exist_ok=True)
    suite = suite or micro_suite()
    (run_dir / "suite.yaml").write_text(yaml.safe_dump(suite, sort_keys=False))
    # run.json records the hash its lines were made with (one suite per run folder; mixed lines keep
    # the default, and readers leave the others out).
    hashes = {x.get("suite_hash") for x in lines}
    suite_hash = hashes.pop() if len(hashes) == 1 and None not in hashes else SUITE_HASH
    meta = {"suite": suite["name"], "suite_hash": suite_hash, "suite_path": "suites/micro.yaml",
            "created": "2026-01-01T00:00:00+00:00", "commit": "abc123", "dirty": False}
    # As a run of exactly these cases records them (`dstbench.results.coverage.record_cases`), so
    # `check` judges the lines, not the suite's other cases.
    planned = [Case(str(x["method"]), str(x["method"]), str(x.get("kind") or "masked"), float(x["density"]),
                    x["sweep"] if isinstance(x.get("sweep"), dict) else None,
                    int(x["seed"]) if isinstance(x.get("seed"), int) else None) for x in lines if "method" in x and "density" in x]
    meta["cases"] = [p.to_record() for p in planned]
    meta["selected"] = list(dict.fromkeys(p.key for p in planned))
    (run_dir / "run.json").write_text(json.dumps(meta))
    (run_dir / "results.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    return run_dir
