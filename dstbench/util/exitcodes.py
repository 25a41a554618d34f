"""The exit codes of every `dstbench` command, defined once so that the commands cannot drift apart.

0 fine: every selected case ok, every gate passed; 1 a gate failed (a failed case, an expectation,
a regression, an unprofiled case); 2 unusable input (an invalid suite or option, a missing run
folder or file, incomparable runs, a run folder in use by another run), nothing run; 74 a file
could not be written or read (disk full, permission denied), finished cases kept; 128 + N ended by
signal N, finished cases kept: 130 SIGINT (Ctrl-C), 143 SIGTERM (`timeout`, a cancelled CI job,
`scancel`), 129 SIGHUP.
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_IO_ERROR = 74  # sysexits.h EX_IOERR
EXIT_INTERRUPTED = 130  # 128 + SIGINT
EXIT_TERMINATED = 143  # 128 + SIGTERM

# One line each, for `dstbench --help` and docs/reference/exit-codes.md.
EXIT_CODES_HELP = """exit codes:
  0    every selected case ok and every gate passed
  1    a gate failed: a failed case, an expectation, a regression (the message says how many)
  2    unusable input: invalid suite, option or run folder, or a run folder in use; nothing run
  74   a file could not be written or read (disk full, permission denied); finished cases kept
  130  interrupted (Ctrl-C); 143 terminated (SIGTERM); 129 hang-up: finished cases kept,
       `dstbench run SUITE --resume` runs the rest"""


def signal_exit_code(signum: int) -> int:
    """The shell's convention for a process ended by signal `signum`."""
    return 128 + int(signum)
