"""What a profile says: phase times, the operator table and the allocator peak, from one trace.

Everything here reads the Chrome trace that `torch.profiler` exported (a dict) or its
`key_averages()`, so the figures in a result line are the ones anyone can re-derive from the saved
`trace.json.gz`. Host times come from the `dstbench::` annotations on the thread that ran the
steps; on CUDA each kernel is charged to the phase during which the host launched it, so GPU time
per phase is exact even though the host runs ahead of the device.
"""

from __future__ import annotations

import bisect
from typing import Any, Iterable

from dstbench.dst import phases
WINDOW = "dstbench.profiled_steps"
OTHER = "other"  # time inside the profiled steps under no phase label (zero_grad, the loop itself)

# GEMMs, by ATen name. Fused attention is kept apart: it is matmul-dominated, but it also holds the
# softmax, so counting it as a matmul would overstate what sparsity of the weights can shrink.
MATMUL_OPS = frozenset(
    {
        "aten::mm",
        "aten::addmm",
        "aten::bmm",
        "aten::baddbmm",
        "aten::addbmm",
        "aten::_addmm_activation",
        "aten::_scaled_mm",
        "aten::_sparse_mm",
        "aten::_sparse_addmm",
        "aten::_sparse_semi_structured_linear",
        "aten::_sparse_semi_structured_mm",
        "aten::_sparse_semi_structured_addmm",
        "aten::_cslt_sparse_mm",  # cuSPARSELt 2:4 (execution semi_structured)
        "aten::sparse_sampled_addmm",  # csr's weight gradient at the active positions
        "aten::_int_mm",
    }
)
ATTENTION_MARKERS = ("scaled_dot_product", "flash_attention", "efficient_attention", "cudnn_attention")
DEVICE_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset")
LAUNCH_CATEGORIES = ("cuda_runtime", "cuda_driver")


def op_category(name: str) -> str:
    if name in MATMUL_OPS:
        return "matmul"
    if any(marker in name for marker in ATTENTION_MARKERS):
        return "attention"
    return "other"


class Intervals:
    """Sorted, non-overlapping labelled intervals (microseconds) with point lookup."""

    def __init__(self, spans: Iterable[tuple[float, float, str]]) -> None:
        self.spans = sorted(spans)
        self._starts = [s for s, _, _ in self.spans]

    def label_at(self, ts: float) -> str | None:
        i = bisect.bisect_right(self._starts, ts) - 1
        if i >= 0:
            start, end, label = self.spans[i]
            if start <= ts <= end:
                return label
        return None


def _annotations(trace: dict[str, Any]) -> list[dict[str, Any]]:
    # `gpu_user_annotation` copies of the same labels live on the device timeline; they span from
    # the first to the last kernel of a range, so they are not phase time and are left out.
    return [
        e
        for e in trace.get("traceEvents", [])
        if e.get("cat") == "user_annotation" and e.get("ph") == "X" and str(e.get("name", "")).startswith(("dstbench::", WINDOW))
    ]


def _outermost(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Events not enclosed by another of `events` on the same thread. A method that opens, say,
    `masking` inside its topology update has that time counted once, in the update."""
    kept: list[dict[str, Any]] = []
    by_thread: dict[Any, list[dict[str, Any]]] = {}
    for e in events:
        by_thread.setdefault((e.get("pid"), e.get("tid")), []).append(e)
    for thread_events in by_thread.values():
        thread_events.sort(key=lambda e: (float(e["ts"]), -float(e["dur"])))
        end = float("-inf")
        for e in thread_events:
            if float(e["ts"]) >= end:
                kept.append(e)
                end = float(e["ts"]) + float(e["dur"])
    return kept


def _phase_name(label: str) -> str:
    return label.removeprefix(phases.PREFIX)


def phase_layout(trace: dict[str, Any]) -> dict[str, Any]:
    """The profiled window, the top-level phase intervals and the sub-phase intervals."""
    events = _annotations(trace)
    windows = [e for e in events if e["name"] == WINDOW]
    if not windows:
        raise ValueError(f"the trace has no {WINDOW!r} annotation")
    window = max(windows, key=lambda e: float(e["dur"]))
    w_start, w_end = float(window["ts"]), float(window["ts"]) + float(window["dur"])
    labelled = [
        e for e in events if e["name"] != WINDOW and w_start <= float(e["ts"]) and float(e["ts"]) + float(e["dur"]) <= w_end
    ]
    # Sub-phases carry a "/" (`topology_update/scoring`); everything else is a top-level phase.
    top = _outermost([e for e in labelled if "/" not in _phase_name(e["name"])])
    sub = _outermost([e for e in labelled if "/" in _phase_name(e["name"])])
    return {
        "window": (w_start, w_end),
        "top": top,
        "sub": sub,
        "top_intervals": Intervals((float(e["ts"]), float(e["ts"]) + float(e["dur"]), _phase_name(e["name"])) for e in top),
        "sub_intervals": Intervals((float(e["ts"]), float(e["ts"]) + float(e["dur"]), _phase_name(e["name"])) for e in sub),
    }


def _ordered(names: Iterable[str], known: tuple[str, ...]) -> list[str]:
    names = set(names)
    return [n for n in known if n in names] + sorted(names - set(known))


def host_phase_times(layout: dict[str, Any]) -> dict[str, Any]:
    """Host milliseconds per phase; top-level phases plus `other` add up to the window exactly."""
    w_start, w_end = layout["window"]
    wall_ms = (w_end - w_start) / 1e3
    top: dict[str, dict[str, float]] = {}
    for e in layout["top"]:
        entry = top.setdefault(_phase_name(e["name"]), {"ms": 0.0, "calls": 0})
        entry["ms"] += float(e["dur"]) / 1e3
        entry["calls"] += 1
    sub: dict[str, dict[str, float]] = {}
    for e in layout["sub"]:
        entry = sub.setdefault(_phase_name(e["name"]), {"ms": 0.0, "calls": 0})
        entry["ms"] += float(e["dur"]) / 1e3
        entry["calls"] += 1
    labelled_ms = sum(v["ms"] for v in top.values())
    out = {name: top[name] for name in _ordered(top, phases.STEP_PHASES)}
    out[OTHER] = {"ms": max(wall_ms - labelled_ms, 0.0), "calls": 0}
    for entry in out.values():
        entry["share"] = entry["ms"] / wall_ms if wall_ms > 0 else 0.0
    subs = {name: sub[name] for name in _ordered(sub, phases.UPDATE_PHASES)}
    for name, entry in subs.items():
        parent = out.get(name.split("/", 1)[0])
        entry["share_of_parent"] = entry["ms"] / parent["ms"] if parent and parent["ms"] > 0 else None
    return {"wall_ms": wall_ms, "labelled_ms": labelled_ms, "phases": out, "update_phases": subs}


def device_phase_times(trace: dict[str, Any], layout: dict[str, Any]) -> dict[str, Any] | None:
    """GPU milliseconds per phase: each kernel, copy or memset goes to the phase its launch fell in
    (matched by correlation id). None when the trace holds no device activity (a CPU run)."""
    events = trace.get("traceEvents", [])
    launches = {
        e["args"]["correlation"]: float(e["ts"])
        for e in events
        if e.get("cat") in LAUNCH_CATEGORIES and "correlation" in e.get("args", {})
    }
    work = [e for e in events if e.get("cat") in DEVICE_CATEGORIES and e.get("ph") == "X"]
    if not work:
        return None
    top: dict[str, float] = {}
    sub: dict[str, float] = {}
    busy_ms = 0.0
    for e in work:
        ms = float(e.get("dur", 0.0)) / 1e3
        launched = launches.get(e.get("args", {}).get("correlation"))
        label = layout["top_intervals"].label_at(launched) if launched is not None else None
        if launched is not None and label is None and not layout["window"][0] <= launched <= layout["window"][1]:
            continue  # launched outside the profiled steps (the profiler's own start-up)
        busy_ms += ms
        top[label or OTHER] = top.get(label or OTHER, 0.0) + ms
        sub_label = layout["sub_intervals"].label_at(launched) if launched is not None else None
        if sub_label:
            sub[sub_label] = sub.get(sub_label, 0.0) + ms
    phases_out = {name: {"ms": top[name], "share": top[name] / busy_ms if busy_ms else 0.0}
                  for name in _ordered(top, phases.STEP_PHASES + (OTHER,))}
    subs_out = {name: {"ms": sub[name]} for name in _ordered(sub, phases.UPDATE_PHASES)}
    return {"busy_ms": busy_ms, "phases": phases_out, "update_phases": subs_out}


def allocation_peak(trace: dict[str, Any], layout: dict[str, Any], device_type: int) -> dict[str, Any] | None:
    """The largest `Total Allocated` among the profiler's memory events of one device type (0 CPU,
    1 CUDA) inside the window, and the phase (or sub-phase) whose time range holds it.

    Allocations are made on the host when an op is issued, so the host-side phase ranges place the
    peak correctly on CUDA too, backward included (the autograd thread allocates while the main
    thread sits inside `backward`)."""
    w_start, w_end = layout["window"]
    best: dict[str, Any] | None = None
    for e in trace.get("traceEvents", []):
        if e.get("name") != "[memory]":
            continue
        args = e.get("args", {})
        if args.get("Device Type") != device_type or not w_start <= float(e["ts"]) <= w_end:
            continue
        if best is None or args.get("Total Allocated", 0) > best["args"].get("Total Allocated", 0):
            best = e
    if best is None:
        return None
    ts = float(best["ts"])
    label = layout["sub_intervals"].label_at(ts) or layout["top_intervals"].label_at(ts) or OTHER
    return {"bytes": int(best["args"]["Total Allocated"]), "phase": label, "at_ms": (ts - w_start) / 1e3}


def operator_table(averages: Any, *, on_device: bool, top: int) -> dict[str, Any]:
    """The `top` operators by self time, and the matmul / attention / other split of all operator
    time. `averages` is `prof.key_averages()`; the phase annotations themselves are not operators."""
    rows = []
    split = {"matmul": 0.0, "attention": 0.0, "other": 0.0}
    for avg in averages:
        name = str(avg.key)
        if name.startswith(("dstbench::", WINDOW, "ProfilerStep")):
            continue
        self_cpu_ms = float(avg.self_cpu_time_total) / 1e3
        self_device_ms = float(getattr(avg, "self_device_time_total", 0.0)) / 1e3 if on_device else None
        basis_ms = self_device_ms if on_device else self_cpu_ms
        split[op_category(name)] += basis_ms
        flops = int(getattr(avg, "flops", 0) or 0)
        rows.append(
            {
                "name": name,
                "calls": int(avg.count),
                "self_ms": basis_ms,
                "self_cpu_ms": self_cpu_ms,
                "self_device_ms": self_device_ms,
                "flops": flops or None,  # None: the profiler has no FLOP formula for this op
                "category": op_category(name),
            }
        )
    total = sum(split.values())
    rows.sort(key=lambda r: -r["self_ms"])
    for row in rows:
        row["share"] = row["self_ms"] / total if total else 0.0
    return {
        "op_basis": "device" if on_device else "cpu",
        "op_ms": total,
        "split_ms": split,
        "matmul_share": split["matmul"] / total if total else None,
        "attention_share": split["attention"] / total if total else None,
        "top_ops": rows[:top],
    }
