"""The exit codes of every `dstbench` command, defined once so that the commands cannot drift apart.

0 fine; 1 a gate failed (an expectation, a regression, a failed or unprofiled case); 2 unusable
input (an invalid suite, a missing run folder or file, incomparable runs), nothing written;
130 interrupted (the usual 128 + SIGINT), finished cases kept.
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130
