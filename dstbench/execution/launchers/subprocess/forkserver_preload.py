"""Imported first by the subprocess launcher's fork server (a preload module): the server then dies
with the `dstbench` process that started it, and its case processes die with the server
(`dstbench.execution.lifeline`). Without it a killed run left the server and its running case behind, since
each case process keeps the server alive."""

from dstbench.execution.lifeline import bind_to_parent

bind_to_parent(watchdog=False)  # the server forks its case processes: no thread in it
