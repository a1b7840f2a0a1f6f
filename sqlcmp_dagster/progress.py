"""Progress of a long batch: a tqdm bar (rate and ETA) on a terminal, plain periodic lines in a log, or nothing.

A CI log cannot redraw a bar, so when the stream is not a terminal one line is written each time another tenth
of the cases is done: count, percentage, rate and ETA, readable with ``grep``.
"""

from __future__ import annotations

import time
from typing import TextIO

from tqdm import tqdm

from sqlcmp_dagster.escaping import terminal_text


class Progress:
    """Call :meth:`advance` once per finished case; :meth:`close` at the end (also after a failure)."""

    def __init__(self, total: int, stream: TextIO, *, quiet: bool = False, label: str = "cases") -> None:
        self.total, self.stream, self.label = total, stream, label
        self.done = 0
        self.started = time.monotonic()
        self.bar: tqdm | None = None
        self.every = max(1, total // 10)
        self.enabled = not quiet and total > 0
        if self.enabled and stream.isatty():
            self.bar = tqdm(total=total, file=stream, unit="case", dynamic_ncols=True, leave=False)

    def advance(self, case_id: str = "") -> None:
        self.done += 1
        if not self.enabled:
            return
        if self.bar is not None:
            # the case id is the suite's text: its control characters would drive the terminal
            self.bar.set_postfix_str(terminal_text(case_id[:30]), refresh=False)
            self.bar.update(1)
        elif self.done % self.every == 0 or self.done == self.total:
            print(self.line(), file=self.stream, flush=True)

    def line(self) -> str:
        """``[done/total] pct  rate cases/s  ETA m:ss`` for the plain log lines."""
        elapsed = max(time.monotonic() - self.started, 1e-9)
        rate = self.done / elapsed
        remaining = (self.total - self.done) / rate if rate else 0.0
        return (f"[{self.done}/{self.total}] {self.done / self.total:4.0%}  {rate:.1f} {self.label}/s  "
                f"ETA {int(remaining // 60)}:{int(remaining % 60):02d}")

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
