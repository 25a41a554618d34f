"""Child processes die with the process that started them; SIGTERM ends a run as Ctrl-C does.

Child side, `bind_to_parent()`, called first thing in every process dstbench starts (a case
process, the fork server, a torchrun agent and its workers):

- Linux: `prctl(PR_SET_PDEATHSIG, SIGKILL)`: the kernel kills the child when its parent exits,
  whatever killed the parent (SIGKILL included). The chain `dstbench run` -> fork server -> case
  process therefore collapses from the top. The kernel fires it when the *thread* that started the
  child exits, so dstbench starts its children from the thread that outlives them (the main one).
- Everywhere, as the portable fallback (macOS has no PDEATHSIG): a daemon thread checks once a
  second whether the child has been re-parented (its parent died) and then ends the process. The
  fork server runs without it (it forks, and forking a threaded process is unsafe) and relies on
  PDEATHSIG, being Linux-only.
- A child whose owning `dstbench` process (`DSTBENCH_LIFELINE_OWNER`) died before the hook ran
  (PDEATHSIG cannot fire for a parent already gone) ends at once.

Parent side, `terminate_as_interrupt()`: SIGTERM and SIGHUP raise `Terminated` in the main thread,
which unwinds the run as KeyboardInterrupt does (the launchers kill the running case, finished
result lines stay), and the command exits 128 + the signal's number. It also names this process
as the owner of the children it starts (`DSTBENCH_LIFELINE_OWNER`).

`python -m dstbench.execution.lifeline MODULE ARGS...` runs `MODULE` (e.g. `torch.distributed.run`) bound
to its parent: how the torchrun launcher starts its agent.

Stdlib only: every command imports this module, and `report` or `compare` must not load torch.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import runpy
import signal
import sys
import threading
import time
from typing import Iterator

OWNER_ENV = "DSTBENCH_LIFELINE_OWNER"
PR_SET_PDEATHSIG = 1
WATCHDOG_INTERVAL_S = 1.0
EXIT_PARENT_GONE = 129  # as if hung up on: 128 + SIGHUP
TERMINATING_SIGNALS = tuple(s for s in (getattr(signal, "SIGTERM", None), getattr(signal, "SIGHUP", None)) if s)


def _set_parent_death_signal(signum: int = getattr(signal, "SIGKILL", 9)) -> bool:
    """Ask Linux to send `signum` to this process when its parent exits; False where it cannot."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        return libc.prctl(PR_SET_PDEATHSIG, int(signum), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, someone else's
        return True
    return True


def parent_gone(parent: int, owner: int | None) -> bool:
    """Whether the process that started us has gone: we were re-parented (to init or a subreaper),
    or the owning dstbench process no longer exists. (Being a child of pid 1 proves nothing: in a
    container `dstbench run` may be pid 1 itself.)"""
    if os.getppid() != parent:
        return True
    return owner is not None and owner != os.getpid() and not _alive(owner)


def _watch(parent: int) -> None:
    # Only the re-parenting check here: a dead owner may linger as a zombie its own parent has not
    # reaped yet, and `kill(pid, 0)` cannot tell a zombie from a live process.
    while True:
        if os.getppid() != parent:
            os._exit(EXIT_PARENT_GONE)
        time.sleep(WATCHDOG_INTERVAL_S)


def bind_to_parent(*, watchdog: bool = True) -> None:
    """End this process when its parent process ends (see the module docstring).

    Call it first in a child's entry point. `watchdog=False` for a process that forks (the fork
    server) where PDEATHSIG is available.
    """
    armed = _set_parent_death_signal()
    parent = os.getppid()
    owner_text = os.environ.get(OWNER_ENV, "")
    owner = int(owner_text) if owner_text.isdigit() else None
    if parent_gone(parent, owner):
        os._exit(EXIT_PARENT_GONE)
    if watchdog or not armed:
        threading.Thread(target=_watch, args=(parent,), name="dstbench-lifeline", daemon=True).start()


class Terminated(BaseException):
    """The process was asked to stop by a signal (SIGTERM, SIGHUP). A BaseException, as
    KeyboardInterrupt is, so that `except Exception` handlers let it through."""

    def __init__(self, signum: int) -> None:
        self.signum = int(signum)
        super().__init__(f"terminated by {signal.Signals(signum).name}")


def _raise_terminated(signum: int, frame: object) -> None:
    # Later signals while the run unwinds (killing its case, closing files) must not cut that short.
    for other in TERMINATING_SIGNALS:
        signal.signal(other, signal.SIG_IGN)
    raise Terminated(signum)


@contextlib.contextmanager
def terminate_as_interrupt() -> Iterator[None]:
    """Within the block, SIGTERM and SIGHUP raise `Terminated` (main thread only; elsewhere a no-op),
    and this process is named the owner of the children it starts. Restored on exit."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {s: signal.signal(s, _raise_terminated) for s in TERMINATING_SIGNALS}
    owner_before = os.environ.get(OWNER_ENV)
    os.environ[OWNER_ENV] = str(os.getpid())
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        if owner_before is None:
            os.environ.pop(OWNER_ENV, None)
        else:
            os.environ[OWNER_ENV] = owner_before


def run_module_bound(argv: list[str]) -> None:
    """`python -m dstbench.execution.lifeline MODULE ARGS...`: run MODULE as `__main__`, bound to our parent."""
    if not argv:
        raise SystemExit("usage: python -m dstbench.execution.lifeline MODULE [ARGS...]")
    bind_to_parent()
    sys.argv = list(argv)
    runpy.run_module(argv[0], run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    run_module_bound(sys.argv[1:])
