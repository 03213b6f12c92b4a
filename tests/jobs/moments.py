"""Moments of a running job that a test acts on, without waiting on the wall clock for them.

:class:`SetAfterMarker` is a console stream that sets an event a little after a marker was printed
``count`` times (the rank's own ``print``, seen by the test as a user sees it); :class:`SetWhen` one
that sets it once the console so far satisfies a test's predicate; :class:`JumpWhenSet`
is the supervisor's clock, whose monotonic time jumps ahead once such an event is set, so
MaxRuntimeInSeconds is reached at that moment through the supervisor's own deadline check (the
policy's timing itself is tested with a fake clock: tests/unit/test_supervisor.py).
"""

from __future__ import annotations

import io
import threading
from collections.abc import Callable

from emulator import supervisor


class SetAfterMarker(io.StringIO):
    """The console stream: sets ``event`` ``delay`` seconds after ``marker`` was written ``count`` times."""

    def __init__(self, marker: str, count: int, event: threading.Event, delay: float = 3.0) -> None:
        super().__init__()
        self.marker, self.count, self.event, self.delay, self.seen = marker, count, event, delay, 0

    def write(self, text: str) -> int:
        self.seen += text.count(self.marker)
        if self.seen >= self.count and not self.event.is_set():
            timer = threading.Timer(self.delay, self.event.set)
            timer.daemon = True
            timer.start()
            self.seen = -(1 << 30)
        return super().write(text)


class JumpWhenSet(supervisor.SystemClock):
    """The supervisor's clock, whose monotonic time jumps ``jump`` seconds ahead once ``event`` is set."""

    def __init__(self, event: threading.Event, jump: float) -> None:
        self.event, self.jump = event, jump

    def monotonic(self) -> float:
        return super().monotonic() + (self.jump if self.event.is_set() else 0.0)


class SetWhen(io.StringIO):
    """The console stream: sets ``event`` as soon as ``ready(console so far)`` is true."""

    def __init__(self, ready: Callable[[str], bool], event: threading.Event) -> None:
        super().__init__()
        self.ready, self.event = ready, event

    def write(self, text: str) -> int:
        written = super().write(text)
        if not self.event.is_set() and self.ready(self.getvalue()):
            self.event.set()
        return written
