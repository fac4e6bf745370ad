"""One Normal event per reconcile pass: what the pass did, step by step, in one message.

A pass that mints a PAT, creates the Secret, the ConfigMap and the pod used to post four
Normal events, four API writes beside the four it made. :class:`EventBatch` holds a pass's
Normal events and posts them as one when the pass ends (:meth:`EventBatch.close`, called in
a ``finally``, so a pass cut off or cancelled still posts what it got to): its reason is
the last one (the furthest the pass got) and its message lists every step as
``Reason: message``, in order::

    PodCreated  PATMinted: minted PAT 12; SecretCreated: created Secret alice-credentials;
                ConfigMapCreated: created ConfigMap alice-skills; PodCreated: created pod ...

A single Normal event keeps its own message. Warnings are never held: each is posted at
once, after the Normal events held so far (so the events read in the order things
happened). A pass that holds its status for the next one hands its events over too
(:meth:`EventBatch.take`, :meth:`EventBatch.carry`). :func:`steps_of` reads a posted event
back into its steps.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

NORMAL = "Normal"
MAX_MESSAGE = 1024
SEPARATOR = "; "
#: ``Reason: `` at the start of the message or after a separator (reasons are CamelCase).
_STEP = re.compile(r"(?:^|; )([A-Z][A-Za-z0-9]*): ")


class Poster(Protocol):
    """Where events go (the reconciler's ``EventSink``)."""

    def post(self, body: Mapping[str, Any], *, type: str, reason: str, message: str) -> None:
        """Post one event."""
        ...


def coalesce(notes: Sequence[tuple[str, str]], limit: int = MAX_MESSAGE) -> tuple[str, str]:
    """The (reason, message) of one event saying ``notes`` (reason, message) in order.

    Over ``limit`` characters, the longest messages are cut first (each keeps its reason),
    so every step stays named and short messages stay whole.
    """
    if len(notes) == 1:
        return notes[0]
    overhead = sum(len(reason) + 2 for reason, _ in notes) + len(SEPARATOR) * (len(notes) - 1)
    lengths = [len(message) for _, message in notes]
    cap = _cap(lengths, max(0, limit - overhead))
    parts = [
        f"{reason}: {message if len(message) <= cap else message[: max(0, cap - 1)] + '…'}"
        for reason, message in notes
    ]
    return notes[-1][0], SEPARATOR.join(parts)[:limit]


def _cap(lengths: list[int], budget: int) -> int:
    """The largest per-message length that fits ``budget`` (water-filling)."""
    if sum(lengths) <= budget:
        return max(lengths, default=0)
    remaining, left = budget, len(lengths)
    for length in sorted(lengths):
        if length * left > remaining:
            return remaining // left
        remaining -= length
        left -= 1
    return remaining


def steps_of(event: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The (reason, message) steps an event says: several for a coalesced Normal event,
    the event itself otherwise."""
    reason, message = event.get("reason", ""), event.get("message", "")
    if event.get("type", NORMAL) == NORMAL:
        found = list(_STEP.finditer(message))
        if len(found) > 1 and found[0].start() == 0 and found[-1].group(1) == reason:
            ends = [match.start() for match in found[1:]] + [len(message)]
            pairs = zip(found, ends, strict=True)
            return [(match.group(1), message[match.end() : end]) for match, end in pairs]
    return [(reason, message)]


def post_coalesced(sink: Poster, body: Mapping[str, Any], notes: Sequence[tuple[str, str]]) -> None:
    """Post ``notes`` about ``body`` as one Normal event (nothing if there are none)."""
    if notes:
        reason, message = coalesce(notes)
        sink.post(body, type=NORMAL, reason=reason, message=message)


class EventBatch:
    """An event sink for one pass about one object: Normal events held and posted as one
    on :meth:`close`; Warnings (and events about other objects) posted at once.

    After :meth:`close` it holds nothing and passes every event straight through (a task
    the pass started may still report after it).
    """

    def __init__(self, sink: Poster) -> None:
        self._sink = sink
        self._body: Mapping[str, Any] | None = None
        self._notes: list[tuple[str, str]] = []
        self._closed = False

    def post(self, body: Mapping[str, Any], *, type: str, reason: str, message: str) -> None:
        """Hold a Normal event about the pass's object; post anything else now."""
        if type == NORMAL and not self._closed and self._same(body):
            self._body = body
            self._notes.append((reason, message))
            return
        self.flush()
        self._sink.post(body, type=type, reason=reason, message=message)

    def flush(self) -> None:
        """Post the Normal events held so far, as one."""
        if self._body is not None:
            post_coalesced(self._sink, self._body, self._notes)
        self._body, self._notes = None, []

    def take(self) -> tuple[tuple[str, str], ...]:
        """The Normal events held so far, handed over instead of posted (the caller says
        them later, through :meth:`carry` of another batch)."""
        notes = tuple(self._notes)
        self._body, self._notes = None, []
        return notes

    def carry(self, body: Mapping[str, Any], notes: Sequence[tuple[str, str]]) -> None:
        """Say ``notes`` (an earlier pass's, about ``body``) first, with this pass's."""
        if notes and not self._closed and self._same(body):
            self._body = self._body or body
            self._notes[:0] = notes
        elif notes:
            post_coalesced(self._sink, body, notes)

    def close(self) -> None:
        """The pass is over: post what is held; from now on events pass straight through."""
        self.flush()
        self._closed = True

    def _same(self, body: Mapping[str, Any]) -> bool:
        if self._body is None:
            return True
        mine, theirs = self._body.get("metadata", {}), body.get("metadata", {})
        return bool(
            mine.get("uid") == theirs.get("uid")
            and mine.get("name") == theirs.get("name")
            and mine.get("namespace") == theirs.get("namespace")
        )
