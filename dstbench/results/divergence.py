"""Training that diverged is not a result: a case whose loss or top-1 became non-finite, or whose
training loss grew by orders of magnitude, gets status `diverged` (a failed status: the report,
`check`, `compare`, pooling over seeds and time to target treat it as failed), with the step where
it showed in `error`. Its timings stand for what they measured, but a speedup of a model that
learns nothing answers no question a researcher asks.
"""

from __future__ import annotations

import math
from typing import Any

DIVERGED = "diverged"
GROWTH = 100.0  # a training loss this many times its first evaluation's: diverged, even if finite


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def divergence(loss: Any = None, curve: Any = None, start_loss: float | None = None) -> str | None:
    """Why a case's training diverged, or None: the first evaluation of `curve` (an accuracy run's,
    in order) whose training loss or top-1 is not finite or whose training loss is over `GROWTH`
    times the first evaluation's (or `start_loss`'s); else `loss` (the last timed segment's) not
    finite or over `GROWTH` times `start_loss`. `start_loss`: what the loss is at the start, ln(C)
    for a classifier of C classes that predicts uniformly (a freshly initialised one does, about).
    Checked where the case ran, before NaN is written as null."""
    if start_loss is not None and _finite(start_loss) and start_loss > 0:
        limit = GROWTH * float(start_loss)
        for point in curve if isinstance(curve, list) else []:
            value = point.get("train_loss") if isinstance(point, dict) else None
            if _finite(value) and value > limit:
                return (f"training diverged by step {point.get('step', '?')}: train_loss {value:.3g} is over {GROWTH:g}x "
                        f"the loss at the start, {start_loss:.3g}")
        if _finite(loss) and loss > limit:
            return f"training diverged: the last timed segment's loss {loss:.3g} is over {GROWTH:g}x the loss at the start, {start_loss:.3g}"
    first = None
    for point in curve if isinstance(curve, list) else []:
        if not isinstance(point, dict):
            continue
        step = point.get("step", "?")
        for key in ("train_loss", "top1"):
            if key in point and point[key] is not None and not _finite(point[key]):
                return f"training diverged by step {step}: {key} is {point[key]}"
        value = point.get("train_loss")
        if _finite(value):
            if first is None:
                first = float(value)
            elif first > 0 and value > GROWTH * max(first, start_loss or 0.0):
                # Not below the start's loss: a task learnt to a loss near 0 may bump by 100x harmlessly.
                return f"training diverged by step {step}: train_loss {value:.3g} is over {GROWTH:g}x the first evaluation's {first:.3g}"
    if loss is not None and isinstance(loss, (int, float)) and not math.isfinite(loss):
        return f"training diverged: the last timed segment's loss is {loss}"
    return None
