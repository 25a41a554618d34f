"""Trackers are context managers around the measured work: latency, memory, FLOPs, energy, noise,
torch.compile's cost.

Each declares the result fields it writes and how they merge (`dstbench.measure.trackers.base`).
`TRACKERS` lists every tracker whose fields a result line has; a new metric is one tracker module
added here. Nothing here imports torch at import time: the result record and the reports read
these declarations without it.
"""

from dstbench.measure.trackers.accuracy import AccuracyTrack
from dstbench.measure.trackers.base import ResultField, Tracker
from dstbench.measure.trackers.compile import CompileRecord
from dstbench.measure.trackers.energy import EnergyMeter
from dstbench.measure.trackers.flops import FlopCounter
from dstbench.measure.trackers.latency import SegmentTimer, SegmentTimes, summarize_ms
from dstbench.measure.trackers.memory import ActivationCounter, AllocatorPeak, RssPeak, StateBytes, training_state_bytes
from dstbench.measure.trackers.noise import NoiseRecord
from dstbench.measure.trackers.profile import ProfileCapture
from dstbench.measure.trackers.ranks import RankPlacement
from dstbench.measure.trackers.training import TrainingStats

# In the order their fields come in a result line (a field declared since schema 1 goes after the
# others, in this order: see dstbench.results.record).
TRACKERS: tuple[type[Tracker], ...] = (
    SegmentTimes, NoiseRecord, AllocatorPeak, RssPeak, StateBytes, ActivationCounter, FlopCounter, TrainingStats,
    AccuracyTrack, ProfileCapture, EnergyMeter, RankPlacement, CompileRecord,
)

__all__ = [
    "TRACKERS",
    "AccuracyTrack",
    "ActivationCounter",
    "AllocatorPeak",
    "CompileRecord",
    "EnergyMeter",
    "FlopCounter",
    "NoiseRecord",
    "ProfileCapture",
    "RankPlacement",
    "ResultField",
    "RssPeak",
    "SegmentTimer",
    "SegmentTimes",
    "StateBytes",
    "Tracker",
    "TrainingStats",
    "summarize_ms",
    "training_state_bytes",
]
