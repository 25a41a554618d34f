"""Table sections for the environment record: the runs (when, which commit), the machine and
versions every case reported, and the GPU's clocks, temperature and throttle reasons per case."""

from __future__ import annotations

import json
from typing import Any

import pandas as pd

from dstbench.util.text import DASH
from dstbench.report.sections import Table, register_table
from dstbench.report.tables import ordered, run_label
from dstbench.results.run_folder import RunFolder

# The record's keys in reading order; keys not listed follow alphabetically.
ENV_ORDER = (
    "device_type", "device_name", "device_memory_bytes", "compute_capability", "gpu_count", "nvml_index", "driver",
    "cuda", "cudnn", "torch", "torchvision", "timm", "python", "python_implementation", "dstbench", "plugins",
    "cpu_model", "cpu_threads", "cpu_count", "ram_bytes", "OMP_NUM_THREADS", "OMP_WAIT_POLICY",
    "float32_matmul_precision", "cuda_matmul_allow_tf32", "cudnn_allow_tf32", "cudnn_benchmark",
    "cudnn_deterministic", "deterministic_algorithms", "PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF",
    "platform", "hostname", "commit", "branch", "commit_time", "dirty",
)
PER_CASE_KEYS = ("gpu_before", "gpu_after")
# What only means something where a case ran on CUDA: left out of a report without a CUDA case
# (older records hold torch's build CUDA and a raw cuDNN integer on every device).
CUDA_ONLY_KEYS = (
    "cuda", "cudnn", "driver", "nvml_index", "compute_capability", "device_memory_bytes", "cuda_matmul_allow_tf32",
    "cudnn_allow_tf32", "cudnn_benchmark", "cudnn_deterministic", "PYTORCH_CUDA_ALLOC_CONF",
)


def _text(value: Any) -> str:
    if value is None:
        return DASH
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (dict, list)):
        return json.dumps(value, sort_keys=True)
    return str(value)


@register_table("runs", "Runs", order=890, terminal=False)
def runs_table(derived: pd.DataFrame) -> Table | None:
    if "run" not in derived or derived.empty:
        return None
    body = []
    for run in pd.unique(derived["run"]):
        meta = RunFolder.open(run).meta
        overrides = meta.get("overrides") or {}
        body.append(
            [run_label(run, derived["run"].unique()), _text(meta.get("suite")), _text(meta.get("created")), _text(meta.get("commit")),
             _text(meta.get("branch")), _text(meta.get("commit_time")), _text(meta.get("dirty")),
             _text(meta.get("suite_path")), " ".join(f"{k}={json.dumps(v)}" for k, v in overrides.items()) or DASH]
        )
    return Table(
        ["run", "suite", "created (UTC)", "commit", "branch", "commit time", "uncommitted changes", "suite file",
         "--set"], body,
        note="From each run folder's run.json, written when the run started; --set lists the suite keys "
        "overridden on the command line.",
    )


@register_table("environment", "Environment", order=900, terminal=False)
def environment_table(derived: pd.DataFrame) -> Table | None:
    """One row per key of the record; a key whose value differs between cases lists every value."""
    if "env" not in derived:
        return None
    records = [env for env in derived["env"] if isinstance(env, dict) and env]
    if not records:
        return None
    keys = {k for env in records for k in env if k not in PER_CASE_KEYS}
    if not any(env.get("device_type") == "cuda" for env in records):
        keys -= set(CUDA_ONLY_KEYS)
    ranked = [k for k in ENV_ORDER if k in keys] + sorted(keys - set(ENV_ORDER))
    body = []
    if "data_loading" in derived:
        # How batches reached the model: a speed figure means little if data loading was in it.
        loading = [v for v in derived["data_loading"] if isinstance(v, str)]
        if loading:
            body.append(["data_loading", " | ".join(dict.fromkeys(loading))])
    for key in ranked:
        values = list(dict.fromkeys(_text(env.get(key)) for env in records))
        body.append([key, values[0] if len(values) == 1 else " | ".join(values)])
    return Table(
        ["key", "value"], body,
        note="As recorded by every case (data_loading: how the cases were fed their batches); differing "
        "values are separated by |.",
    )


def _pair(before: dict[str, Any], after: dict[str, Any], key: str) -> str:
    return f"{_text(before.get(key))} → {_text(after.get(key))}"


def _reasons(snapshot: dict[str, Any]) -> str:
    reasons = snapshot.get("throttle_reasons")
    if reasons is None:
        return DASH
    return ", ".join(str(r) for r in reasons) or "none"


@register_table("gpu", "GPU clocks and throttling", order=910, terminal=False)
def gpu_table(derived: pd.DataFrame) -> Table | None:
    if "env" not in derived:
        return None
    body = []
    for _, r in ordered(derived).iterrows():
        env = r["env"] if isinstance(r["env"], dict) else {}
        before, after = env.get("gpu_before") or {}, env.get("gpu_after") or {}
        if not before and not after:
            continue
        body.append(
            [str(r["case_id"]), _pair(before, after, "sm_clock_mhz"), _text(before.get("max_sm_clock_mhz")),
             _pair(before, after, "mem_clock_mhz"), _pair(before, after, "temperature_c"),
             _pair(before, after, "power_w"), _text(before.get("power_limit_w")), _reasons(before), _reasons(after)]
        )
    if not body:
        return None
    return Table(
        ["case", "SM MHz", "max SM MHz", "memory MHz", "temperature °C", "power W", "power limit W",
         "throttle reasons before", "throttle reasons after"],
        body,
        note="NVML readings just before and just after each case (before → after).",
    )
