"""The DST layer: the `Method` contract and its training step, the method registry, the update
schedule, optimizers, profiler phases, checkpoints, and the two engines: masked (full-tensor) DST in
`dstbench.dst.masked`, compact (physically resized) DST in `dstbench.dst.compact`."""
