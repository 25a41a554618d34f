"""What is measured around the work: trackers (latency, memory, FLOPs, energy, noise), the
environment record, NVML, and profiling."""
