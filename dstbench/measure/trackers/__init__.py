"""Trackers are measurements around the work of a case: latency, memory, FLOPs, energy, noise,
torch.compile's cost. Each registers where it is defined (`register_tracker`) and declares when it
runs, the result fields it writes and how they merge (`dstbench.measure.trackers.base`); the line
class, the case session and `Run.frame()` take every registered tracker. A new metric is one
tracker module, here or in a plugin. Nothing here imports torch at import time: the result record
and the reports read these declarations without it.
"""

# isort: off
# Imported for their registration, in this order: the session runs trackers in it (where no
# `after` says otherwise), and a field declared since schema 1 takes its place in a line by it.
from dstbench.measure.trackers import latency, noise, memory, flops, training, accuracy, profile, energy, ranks, compile  # noqa: F401
# isort: on
from dstbench.measure.trackers.accuracy import AccuracyTrack
from dstbench.measure.trackers.base import CaseContext, ResultField, SegmentOutcome, Tracker
from dstbench.measure.trackers.compile import CompileRecord
from dstbench.measure.trackers.energy import EnergyMeter
from dstbench.measure.trackers.flops import FlopCounter
from dstbench.measure.trackers.latency import SegmentTimes, summarize_ms
from dstbench.measure.trackers.memory import ActivationCounter, AllocatorPeak, RssPeak, StateBytes, training_state_bytes
from dstbench.measure.trackers.noise import NoiseRecord
from dstbench.measure.trackers.profile import ProfileCapture
from dstbench.measure.trackers.ranks import RankPlacement
from dstbench.measure.trackers.registry import register_tracker, registered_trackers, tracker_class
from dstbench.measure.trackers.training import TrainingStats

__all__ = [
    "AccuracyTrack",
    "ActivationCounter",
    "AllocatorPeak",
    "CaseContext",
    "CompileRecord",
    "EnergyMeter",
    "FlopCounter",
    "NoiseRecord",
    "ProfileCapture",
    "RankPlacement",
    "ResultField",
    "RssPeak",
    "SegmentOutcome",
    "SegmentTimes",
    "StateBytes",
    "Tracker",
    "TrainingStats",
    "register_tracker",
    "registered_trackers",
    "summarize_ms",
    "tracker_class",
    "training_state_bytes",
]
