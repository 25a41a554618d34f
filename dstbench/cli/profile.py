"""`dstbench profile SUITE`: a run with profiling switched on, then, per case, where the time goes."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from rich.console import Console

from dstbench.cli.common import Commands, add_command, add_selection_arguments, parse_assignments
from dstbench.util.exitcodes import EXIT_FAILED, EXIT_OK, EXIT_USAGE
from dstbench.util.files import RESULTS_FILE
from dstbench.util.text import clip, human_bytes, last_line, percent


def add_parser(commands: Commands) -> None:
    p = add_command(commands, "profile", "profile the cases of a suite: where each method's time and memory go")
    p.add_argument("suite", metavar="SUITE", help="suite YAML file (profiling is switched on)")
    add_selection_arguments(p)
    p.set_defaults(func=main)


def _pct(value: float | None) -> str:
    return percent(value, missing_text="")


def phase_rows(profile: dict[str, Any]) -> list[list[str]]:
    """Rows (phase, ms, share[, GPU ms, GPU share]) in step order, sub-phases under their parent."""
    # Here, not at the top: the profiling package imports torch, and every command builds the parser.
    from dstbench.measure.profiling.analysis import OTHER

    device = profile.get("device") or None
    subs = profile.get("update_phases") or {}
    rows: list[list[str]] = []

    def row(label: str, name: str, entry: dict[str, Any], share: float | None, table: str) -> list[str]:
        out = [label, f"{entry['ms']:.1f}", _pct(share)]
        if device is not None:
            dev = (device.get(table) or {}).get(name)
            out += [f"{dev['ms']:.1f}" if dev else "0.0", _pct(dev.get("share")) if dev else ""]
        return out

    for name, entry in profile["phases"].items():
        label = "other (unlabelled)" if name == OTHER else name
        rows.append(row(label, name, entry, entry.get("share"), "phases"))
        for sub_name, sub in subs.items():
            if sub_name.split("/", 1)[0] == name:
                # Indented rows are parts of their parent; their share is of the parent, in parentheses.
                out = row("  ↳ " + sub_name.split("/", 1)[1], sub_name, sub, sub.get("share_of_parent"), "update_phases")
                out[2] = f"({out[2]})" if out[2] else ""
                rows.append(out)
    total = ["profiled wall time", f"{profile['wall_ms']:.1f}", "100.0%"]
    if device is not None:
        total += [f"{device['busy_ms']:.1f}", "100.0%"]
    rows.append(total)
    return rows


def format_profile(line: dict[str, Any], run_dir: Path) -> str:
    """The text block `dstbench profile` prints for one result line."""
    from tabulate import tabulate

    case = line.get("case_id", "?")
    profile = line.get("profile")
    if line.get("status") != "ok":
        return f"{case}: {line.get('status')} {clip(last_line(line.get('error')), 300)}"
    if not profile:
        return f"{case}: not profiled"
    if "error" in profile:
        return f"{case}: profiling failed\n{profile['error']}"
    update = profile["update"]
    how = {
        "scheduled": f"the topology update scheduled at step {update['step']}",
        "forced": f"a topology update forced at step {update['step']} (none scheduled within reach)",
        "none": "no topology update (the method has none)",
    }[update["how"]]
    lines = [f"{case}: {profile['steps']} profiled steps ending in {how}; {update['advanced_steps']} unprofiled steps before"]
    headers = ["phase", "host ms", "share"]
    if profile.get("device"):
        headers += ["GPU ms", "GPU share"]
    lines.append(tabulate(phase_rows(profile), headers=headers, tablefmt="simple", disable_numparse=True,
                          colalign=["left"] + ["right"] * (len(headers) - 1)))
    if profile.get("update_phases"):
        lines.append("↳ rows: parts of the topology update; (share) is of the update's time")
    split = profile.get("split_ms") or {}
    basis = "GPU" if profile.get("op_basis") == "device" else "CPU"
    if profile.get("op_ms"):
        lines.append(
            f"operator time ({basis}, {profile['op_ms']:.1f} ms): matmul {_pct(profile.get('matmul_share'))}, "
            f"attention {_pct(profile.get('attention_share'))}, other {_pct(split.get('other', 0) / profile['op_ms'])}"
        )
    top = profile.get("top_ops") or []
    if top:
        lines.append("top operators: " + ", ".join(f"{op['name']} {_pct(op['share'])}" for op in top[:5]))
    memory = profile.get("memory") or {}
    parts = [f"{k.replace('_', ' ')} {human_bytes(v)}" for k, v in memory.items() if k != "total"]
    lines.append(f"memory {human_bytes(memory.get('total'))}: " + ", ".join(parts))
    peak = profile.get("allocator_peak") or {}
    if peak.get("bytes") is not None:
        lines.append(f"allocation peak {human_bytes(peak['bytes'])} in {peak.get('phase')} ({peak['source']})")
    lines.append(f"trace: {run_dir / profile['trace']}")
    if profile.get("memory_snapshot"):
        lines.append(f"memory snapshot: {run_dir / profile['memory_snapshot']}")
    energy = line.get("energy") or {}
    if energy.get("measured"):
        lines.append(f"energy: {energy['joules_per_step']:.3f} J/step, {energy['images_per_joule']:.1f} images/J")
    elif energy:
        lines.append(f"energy: not measured ({energy.get('reason')})")
    return "\n".join(lines)


def profile_override(suite_path: Path) -> dict[str, Any]:
    """The suite's own `profile` settings with profiling switched on (`--overrides` replace a whole
    top-level key, so the suite's steps and snapshot choice are carried over here)."""
    from dstbench.suite.loading import SuiteError, read_yaml

    try:
        data = read_yaml(suite_path)
    except SuiteError:
        data = None  # load_suite reports it properly
    current = data.get("profile") if isinstance(data, dict) else None
    return {**current, "enabled": True} if isinstance(current, dict) else {"enabled": True}


def main(args: argparse.Namespace) -> int:
    from dstbench.suite.loading import SuiteError
    from dstbench.results.run_folder import RunFolder
    from dstbench.execution.orchestrator import run_suite

    console = Console(stderr=True, soft_wrap=True)
    suite_path = Path(args.suite)
    try:
        sets = parse_assignments(getattr(args, "set", None))
    except ValueError as exc:  # a malformed --set
        console.print(clip(f"--set {exc}", 1000), style="red", highlight=False, markup=False)
        return EXIT_USAGE
    try:
        run_dir = run_suite(
            suite_path,
            out=args.out,
            device=args.device,
            only=args.only,
            densities=args.density,
            overrides={**sets, "profile": profile_override(suite_path)},
            console=console,
        )
    except SuiteError as exc:
        console.print(clip(str(exc), 4000), style="red", highlight=False, markup=False)
        return EXIT_USAGE
    lines = RunFolder.open(run_dir).lines()
    print("\n\n".join(format_profile(line, run_dir) for line in lines))
    print(f"\nresults: {run_dir / RESULTS_FILE}")
    failed = [l for l in lines if l.get("status") != "ok" or not l.get("profile") or "error" in l["profile"]]
    return EXIT_FAILED if failed else EXIT_OK
