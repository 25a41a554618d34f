"""A lock on a folder itself: `flock` on the folder's own directory descriptor.

A lock on a file inside the folder can be bypassed by deleting the file (the next writer locks a new
one); a lock on the folder's inode cannot, short of removing the folder. The kernel drops a flock
when its holder dies however it dies. Writers take it exclusively (`FolderLock`); a reader asks
whether another process holds it (`held_by_another`) with a shared lock taken and dropped at once,
which a writer starting at that instant waits out (`FolderLock.acquire`'s retries).
"""

from __future__ import annotations

import fcntl
import os
import time
from pathlib import Path

# The folders this process holds exclusively (real paths): its own readers do not count it.
_HELD: set[str] = set()

# How long a writer retries before it calls the folder taken: a reader's shared probe lasts
# microseconds, a writer's lock the whole run.
PROBE_GRACE_S = 0.5


class FolderLock:
    """An exclusive lock on `folder`; `acquire` returns whether it was taken."""

    def __init__(self, folder: str | Path) -> None:
        self.folder = Path(folder)
        self._fd: int | None = None

    def acquire(self, timeout_s: float = PROBE_GRACE_S, poll_s: float = 0.05) -> bool:
        """Take the lock, retrying for up to `timeout_s`; False when another holder keeps it."""
        fd = os.open(self.folder, os.O_RDONLY | os.O_DIRECTORY)
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    os.close(fd)
                    return False
                time.sleep(poll_s)
            except OSError:
                os.close(fd)
                raise
        self._fd = fd
        _HELD.add(os.path.realpath(self.folder))
        return True

    def release(self) -> None:
        if self._fd is not None:
            _HELD.discard(os.path.realpath(self.folder))
            os.close(self._fd)  # closing drops the flock
            self._fd = None


def held_by_another(folder: str | Path) -> bool:
    """Whether another process (or another lock of this one) holds `folder` exclusively; False for a
    folder this process holds, or one that cannot be opened (a reader then says what is wrong)."""
    if os.path.realpath(folder) in _HELD:
        return False
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        os.close(fd)  # drops the shared lock too
    return False
