"""SIGINT and SIGTERM as an exception in the main thread, so that a long command stops its work, keeps what
is finished, and exits with the signal's status (130, 143).

Without this, SIGTERM ended the process at once (no cleanup: the workers ran on), and SIGINT's
``KeyboardInterrupt`` could be caught by a library on its way up (Dagster fails the run it lands in and goes on
with the next). :class:`Stopped` is a ``KeyboardInterrupt``, so what already stops on Ctrl-C stops on it.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

#: The signals that stop a command.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Stopped(KeyboardInterrupt):
    """A stop signal arrived; :attr:`status` is the exit status that says which (128 + its number)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum

    @property
    def status(self) -> int:
        return 128 + self.signum

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name


class StopSignals:
    """What :func:`stop_signals` saw: :attr:`received` is the first stop signal's number, or None.

    A library may put its own handler in place for a while (Dagster does during a run, and turns the signal
    into that run's failure) or swallow the exception (SQLite's progress handler takes it for a cancel), so
    the signals are also read from the interpreter's wakeup file descriptor, which the C-level handler writes
    every signal's number to whatever Python handler is installed: :meth:`check` sees them all."""

    def __init__(self, wakeup: int | None = None) -> None:
        self.received: int | None = None
        self.wakeup = wakeup

    def check(self) -> None:
        """Raise :class:`Stopped` if a stop signal arrived, whoever handled it."""
        while self.received is None and self.wakeup is not None:
            try:
                numbers = os.read(self.wakeup, 512)
            except BlockingIOError:
                break
            self.received = next((n for n in numbers if n in STOP_SIGNALS), None)
            if not numbers:
                break
        if self.received is not None:
            raise Stopped(self.received)


@contextmanager
def stop_signals() -> Iterator[StopSignals]:
    """Within the block, the first SIGINT or SIGTERM raises :class:`Stopped` in the main thread; later ones are
    ignored, so that the cleanup the first one started (ending workers, writing what is finished) is not cut
    short. The process's own handlers are back when the block ends. Outside the main thread (where Python
    cannot install handlers) the block runs as it is."""
    if threading.current_thread() is not threading.main_thread():
        yield StopSignals()
        return
    reader, writer = os.pipe()
    os.set_blocking(reader, False)
    os.set_blocking(writer, False)
    seen = StopSignals(reader)

    def stop(signum: int, frame: FrameType | None) -> None:
        for number in STOP_SIGNALS:
            signal.signal(number, signal.SIG_IGN)
        seen.received = signum
        raise Stopped(signum)

    previous = {number: signal.signal(number, stop) for number in STOP_SIGNALS}
    wakeup = signal.set_wakeup_fd(writer, warn_on_full_buffer=False)
    try:
        yield seen
    finally:
        signal.set_wakeup_fd(wakeup)
        for number, handler in previous.items():
            signal.signal(number, handler)
        os.close(reader)
        os.close(writer)
