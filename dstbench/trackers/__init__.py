"""Trackers are context managers around the measured work: latency, memory, FLOPs, energy."""

from dstbench.trackers.flops import FlopCounter
from dstbench.trackers.latency import SegmentTimer, summarize_ms
from dstbench.trackers.memory import ActivationCounter, AllocatorPeak, RssPeak, training_state_bytes

__all__ = [
    "ActivationCounter",
    "AllocatorPeak",
    "FlopCounter",
    "RssPeak",
    "SegmentTimer",
    "summarize_ms",
    "training_state_bytes",
]
