"""`--resume` on another machine. A run folder's kept lines were timed where their `env` says; a
group timed partly on one machine and partly on another would pair rounds (and merge dense's
segments) across machines, and its lines would carry only the last machine's env. So `--resume`
compares each line it would keep with this machine (host, CPU model, device type, torch) and
refuses lines from another, naming what differs, unless `--allow-other-machine`: then every group
holding such a line counts as not done and is timed again from its start here, and a line from
another machine is replaced, never merged (`dstbench.execution.orchestrator.write_group`).
"""

from __future__ import annotations

import platform
from typing import Any

import torch

from dstbench.execution.launchers.subprocess.placement import resolve_device_type
from dstbench.measure.environment import cpu_model

# What a line's `env` must match to be kept on resume: (env key, how messages name it).
MACHINE_KEYS = (("hostname", "host"), ("cpu_model", "CPU model"), ("device_type", "device"), ("torch", "torch"))


def this_machine(device: str) -> dict[str, Any]:
    """This machine as lines record it, for a suite's `device` (without initialising CUDA)."""
    return {
        "hostname": platform.node(), "cpu_model": cpu_model(), "device_type": resolve_device_type(device),
        "torch": torch.__version__,
    }


def machine_differences(line: dict[str, Any], here: dict[str, Any]) -> list[str]:
    """"host: a, here b" for each machine key the line's env records otherwise than `here` (a line
    without an env, e.g. one that failed before timing, has nothing to compare)."""
    env = line.get("env")
    if not isinstance(env, dict):
        return []
    return [
        f"{label}: {env[key]}, here {here[key]}" for key, label in MACHINE_KEYS
        if env.get(key) is not None and str(env[key]) != str(here[key])
    ]


def other_machine_lines(lines: dict[str, dict[str, Any]], here: dict[str, Any]) -> dict[str, list[str]]:
    """The keys of `lines` timed on another machine, with what differs."""
    return {key: diffs for key, line in lines.items() if (diffs := machine_differences(line, here))}


def refusal(run_dir: Any, foreign: dict[str, list[str]]) -> str:
    """The `--resume` error for a run folder holding lines of another machine."""
    differences = sorted({d for diffs in foreign.values() for d in diffs})
    cases = sorted(foreign)
    listed = ", ".join(cases[:8]) + (f" and {len(cases) - 8} more" if len(cases) > 8 else "")
    return (
        f"{run_dir} holds lines timed on another machine ({'; '.join(differences)}): {listed}. Times of two machines "
        "do not mix in one run: resume on the machine that made them, start a new run, or pass --allow-other-machine "
        "to time every group holding such a line again here"
    )
