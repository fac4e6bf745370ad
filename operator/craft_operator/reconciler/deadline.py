"""In-memory deadlines that a step of the wall clock does not move.

A wait the operator keeps in memory (a pool's refusal backoff, its failure waves, a held
status write) is measured on a clock that never steps (``time.monotonic``): measured on the
wall clock, an NTP correction of an hour back would hold the wait for that hour. The wall
moment is kept beside it only to be said in a condition message, fixed while it stands.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

#: Seconds of a clock that never steps (``time.monotonic`` in production).
SteadyClock = Callable[[], float]
WallClock = Callable[[], datetime]


@dataclass(frozen=True)
class Moment:
    """A moment on both clocks: for waits (steady) and for messages (wall)."""

    steady: float
    wall: datetime

    @classmethod
    def now(cls, steady: SteadyClock, wall: WallClock) -> Moment:
        """The present moment on both clocks."""
        return cls(steady(), wall())

    def after(self, seconds: float) -> Moment:
        """The moment ``seconds`` later."""
        return Moment(self.steady + seconds, self.wall + timedelta(seconds=seconds))

    def until(self, later: Moment) -> float:
        """Seconds from this moment to ``later`` (negative once it has passed)."""
        return later.steady - self.steady

    def since(self, earlier: Moment) -> float:
        """Seconds from ``earlier`` to this moment."""
        return self.steady - earlier.steady
