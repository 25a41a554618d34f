"""The accuracy track's figures: top-1 and top-5 on the test split after training, the epochs, the
training time and the accuracy curve. `dstbench.execution.accuracy_track.measure_accuracy` trains,
evaluates and writes them (with the training fields of `TrainingStats` for its own run)."""

from __future__ import annotations

from typing import Any

from dstbench.measure.trackers.base import LARGEST, LATEST, RANK0, ResultField, Tracker
from dstbench.measure.trackers.registry import register_tracker


@register_tracker("accuracy")
class AccuracyTrack(Tracker):
    """Declares the accuracy track's fields; the track itself is a whole training run, not a
    with-block around the timed segments (it runs in no phase). A row pooled over seeds shows their
    mean (top-1 and top-5 with a Student-t interval: `dstbench.results.pooling`)."""

    fields = (
        ResultField("top1", float | None, LATEST, RANK0, "top-1 accuracy on the test split", default=None, per_rank=True,
                    unit="fraction", over_seeds="mean", better="higher", report=False),
        ResultField("top5", float | None, LATEST, RANK0, "top-5 accuracy (None with 5 classes or fewer)", default=None,
                    unit="fraction", over_seeds="mean", better="higher", report=False),
        ResultField("epochs", int | None, LATEST, RANK0, "epochs trained", default=None, unit="epochs", report=False),
        ResultField("train_time_s", float | None, LATEST, LARGEST, "seconds of training", default=None, per_rank=True,
                    unit="s", over_seeds="mean", better="lower", report=False),
        ResultField("curve", list[dict[str, Any]] | None, LATEST, RANK0, "one point per evaluation", default=None),
    )
