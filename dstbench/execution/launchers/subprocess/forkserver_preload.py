"""Imported first by the subprocess launcher's fork server (a preload module): the server then dies
with the `dstbench` process that started it, and its case processes die with the server
(`dstbench.execution.lifeline`). Without it a killed run left the server and its running case behind, since
each case process keeps the server alive."""

import signal

# Ctrl-C in a terminal reaches the whole process group: the `dstbench` process handles it (it stops
# the run and says what finished); the server, still importing torch, would print a traceback.
signal.signal(signal.SIGINT, signal.SIG_IGN)

from dstbench.execution.lifeline import bind_to_parent  # noqa: E402

bind_to_parent(watchdog=False)  # the server forks its case processes: no thread in it
