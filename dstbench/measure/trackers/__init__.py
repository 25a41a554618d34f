"""Trackers are context managers around the measured work: latency, memory, FLOPs, energy."""

from dstbench.measure.trackers.flops import FlopCounter
from dstbench.measure.trackers.latency import SegmentTimer, summarize_ms
from dstbench.measure.trackers.memory import ActivationCounter, AllocatorPeak, RssPeak, training_state_bytes

__all__ = [
    "ActivationCounter",
    "AllocatorPeak",
    "FlopCounter",
    "RssPeak",
    "SegmentTimer",
    "summarize_ms",
    "training_state_bytes",
]
