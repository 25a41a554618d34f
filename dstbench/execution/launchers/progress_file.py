"""A case's progress through a file, where its process has no pipe to the launcher (a torchrun rank,
a cluster job): the process appends `stage done total` lines, the launcher forwards new whole lines
to its `progress` callback as it polls."""

from __future__ import annotations

from pathlib import Path

from dstbench.execution.case_setup import Progress


class ProgressFile:
    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.seen = 0  # lines forwarded so far

    def write(self, stage: str, done: int, total: int) -> None:
        """Append one line (the writer's side); a `Progress` callback."""
        with open(self.path, "a", encoding="utf-8") as handle:
            handle.write(f"{stage} {done} {total}\n")

    def exists(self) -> bool:
        return self.path.exists()

    def forward(self, progress: Progress) -> None:
        """Call `progress` for each whole line written since the last call (the reader's side)."""
        try:
            text = self.path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return
        # The writer may be writing a line right now: only whole lines count.
        lines = text[: text.rfind("\n") + 1].splitlines()
        for line in lines[self.seen:]:
            parts = line.split()
            if len(parts) == 3 and parts[1].isdigit() and parts[2].isdigit():
                progress(parts[0], int(parts[1]), int(parts[2]))
        self.seen = len(lines)
