"""A stand-in for the work queues (and anything else that is told to add or forget keys)
that records what it was told."""

from __future__ import annotations


class RecordingQueue:
    """Records the keys added (with their delays) and forgotten."""

    def __init__(self) -> None:
        self.added: list[tuple[str, str]] = []
        self.delays: list[float] = []
        self.forgotten: list[tuple[str, str]] = []

    def add(self, key: tuple[str, str], delay: float = 0.0) -> None:
        """Record an added key."""
        self.added.append(key)
        self.delays.append(delay)

    def forget(self, key: tuple[str, str]) -> None:
        """Record a forgotten key."""
        self.forgotten.append(key)
