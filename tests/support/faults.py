"""Fault injection for the emulator: a flaky API server, reproducible from a seed.

Two small parts plug into :class:`~tests.support.emulator.KubeEmulator`:

- :class:`ApiFaults` is a ``before_request`` hook. It answers a share (``rate``) of the
  operator's requests with one of the failures a real API server or the network between
  produces: ``409 Conflict`` (writes only), ``429 Too Many Requests`` with ``Retry-After``,
  ``500 Internal Server Error``, a connection dropped before the request is served, and a
  connection dropped *after* a write was applied (the client never learns it succeeded,
  the case that tests idempotence the hardest).
- :func:`cut_watches_periodically` drops every open watch connection every few seconds.

Both draw from a ``random.Random`` the test seeds, so a failing run replays. Only the
operator's requests for resources are failed: not other clients' (the test's own go through
the emulator's Python API anyway), and not ``/version`` or API discovery, which kopf and
``craft-operator run`` read once at start-up (a failure there is a restart, which the
crash tests cover)::

    faults = ApiFaults(emulator, random.Random(seed), rate=0.1)
    emulator.before_request.append(faults)
    cutter = asyncio.create_task(cut_watches_periodically(emulator, random.Random(seed)))
"""

from __future__ import annotations

import asyncio
import collections
import json
import random
from dataclasses import dataclass, field

import aiohttp.web
from kmock._internal import rendering

from tests.support.emulator import OPERATOR_AGENTS, WRITE_METHODS, KubeEmulator

WRITE_FAULTS = ("409", "429", "500", "drop-before", "drop-after")
READ_FAULTS = ("429", "500", "drop-before")


def failure_response(code: int, reason: str, message: str) -> aiohttp.web.Response:
    """An API server's Status answer to a request that failed."""
    body = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
    return aiohttp.web.Response(status=code, text=json.dumps(body), content_type="application/json")


def _drop(request: rendering.Request) -> None:
    raw = request._raw_request
    if raw is not None and raw.transport is not None:
        raw.transport.abort()


@dataclass
class ApiFaults:
    """A ``before_request`` hook that fails ``rate`` of the operator's API requests."""

    emulator: KubeEmulator
    rng: random.Random
    rate: float = 0.1
    retry_after: int = 1
    enabled: bool = True
    #: How many faults of each kind were injected (``409``, ``drop-after``, ...).
    injected: collections.Counter[str] = field(default_factory=collections.Counter)
    _decks: dict[bool, list[str]] = field(default_factory=lambda: {True: [], False: []})

    def _next_kind(self, is_write: bool) -> str:
        """Kinds come from a shuffled deck, so every kind is tried as often as the others."""
        deck = self._decks[is_write]
        if not deck:
            deck.extend(WRITE_FAULTS if is_write else READ_FAULTS)
            self.rng.shuffle(deck)
        return deck.pop()

    async def __call__(self, request: rendering.Request) -> aiohttp.web.StreamResponse | None:
        """Maybe answer ``request`` with a fault; ``None`` lets it through."""
        if not self.enabled:
            return None
        if not request.headers.get("User-Agent", "").startswith(OPERATOR_AGENTS):
            return None
        if request.resource is None:  # /version and discovery
            return None
        if self.rng.random() >= self.rate:
            return None
        is_write = request.method.value.upper() in WRITE_METHODS
        kind = self._next_kind(is_write)
        if request.params.get("watch") in ("true", "1") and kind == "drop-before":
            kind = "500"  # a watch that never starts is a 500 to the client either way
        self.injected[kind] += 1
        if kind == "409":
            return failure_response(
                409, "Conflict", "the object has been modified (injected fault)"
            )
        if kind == "429":
            response = failure_response(
                429, "TooManyRequests", "too many requests (injected fault)"
            )
            response.headers["Retry-After"] = str(self.retry_after)
            return response
        if kind == "500":
            return failure_response(500, "InternalError", "an internal error (injected fault)")
        if kind == "drop-after":
            response = await self.emulator.serve_unhooked(request)
            _drop(request)
            return response
        _drop(request)
        return aiohttp.web.Response(status=500)  # never sent: the connection is gone


async def cut_watches_periodically(
    emulator: KubeEmulator,
    rng: random.Random,
    *,
    every: tuple[float, float] = (1.0, 4.0),
    cuts: list[int] | None = None,
) -> None:
    """Drop all open watches every ``every`` seconds (uniform), until cancelled.

    The number of streams cut each time is appended to ``cuts`` when given.
    """
    while True:
        await asyncio.sleep(rng.uniform(*every))
        cut = emulator.cut_watches()
        if cuts is not None:
            cuts.append(cut)
