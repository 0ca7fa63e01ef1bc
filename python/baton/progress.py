"""A one-line progress bar on stderr, for loading weights and for benchmark runs (no dependency)."""

from __future__ import annotations

import sys
import time
from typing import Callable, TextIO


class Progress:
    """Draws `label [#####.....] done/total unit  elapsed` on one line, at most every 0.2 s, and ends the line
    when done reaches total."""

    def __init__(self, total: float, label: str, unit: str = "", scale: float = 1.0,
                 stream: TextIO = sys.stderr) -> None:
        self.total, self.label, self.unit, self.scale, self.stream = total, label, unit, scale, stream
        self.done, self.shown, self.ended = 0.0, -1.0, False
        self.start = time.perf_counter()

    def update(self, done: float) -> None:
        self.done = done
        now = time.perf_counter()
        if self.ended or (now - self.shown < 0.2 and done < self.total):
            return
        self.shown = now
        if self.stream.closed:  # a test harness or a pipe closed it: draw nothing
            return
        filled = int(30 * done / self.total) if self.total else 30
        shown = f"{done / self.scale:.1f}/{self.total / self.scale:.1f}" if self.scale != 1.0 else \
            f"{int(done)}/{int(self.total)}"
        self.stream.write(f"\r{self.label:>24} [{'#' * filled}{'.' * (30 - filled)}] {shown}{self.unit} "
                          f"{now - self.start:6.1f} s")
        if done >= self.total:
            self.stream.write("\n")
            self.ended = True
        self.stream.flush()


def loading_bar(label: str) -> Callable[[int, int], None]:
    """A load_progress callback (bytes done, bytes in all) drawing the weights' upload in GB."""
    bar = []

    def update(done: int, total: int) -> None:
        if not bar:
            bar.append(Progress(total, label, " GB", 1e9))
        bar[0].update(done)

    return update
