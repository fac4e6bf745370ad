"""A stand-in for the work queues (and anything else that is told to add or forget keys)
that records what it was told."""

from __future__ import annotations

from collections.abc import Callable


class RecordingQueue:
    """Records the keys added (with their delays) and forgotten."""

    def __init__(self) -> None:
        self.added: list[tuple[str, str]] = []
        self.delays: list[float] = []
        self.forgotten: list[tuple[str, str]] = []

    def add(
        self, key: tuple[str, str], delay: float = 0.0, *, echo: Callable[[], bool] | None = None
    ) -> None:
        """Record an added key (an echo check is the real queue's business)."""
        self.added.append(key)
        self.delays.append(delay)

    def forget(self, key: tuple[str, str]) -> None:
        """Record a forgotten key."""
        self.forgotten.append(key)
