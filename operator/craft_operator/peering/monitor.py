"""Watch the peering object and switch the :class:`ActivityGate` as kopf's rule says.

kopf keeps its pause state to itself (a local toggle in ``kopf.spawn_tasks``). Rather than
reach into kopf's internals, the operator reads the same peering object with its own client
and applies the same rule (:mod:`craft_operator.peering.rule`):

- a poll every :attr:`PeeringOptions.check_interval` seconds finds out when to resume (a
  paused kopf streams nothing, so only a read can tell that the blocking peer is gone);
- while active, kopf streams the peering object to :meth:`PeeringMonitor.observe` too, so a
  returning higher-priority replica stops this one at once, not at the next poll.

The peering object is always one ClusterKopfPeering, also for an operator restricted to
some namespaces (kopf would use a KopfPeering per namespace; :mod:`.handlers.peering` makes
it use the cluster-wide one): one object to create and to look at, one RBAC grant.

Until the first successful read that shows its own keep-alive the replica stays a standby
(kopf, with mandatory peering, starts paused too). If the object cannot be read for longer
than the keep-alive lifetime, the replica steps down: its peers may have taken over.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import socket
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from craft_operator.kube.client import ApiError, Kind, KubeClient, NotFoundError
from craft_operator.peering.gate import ActivityGate
from craft_operator.peering.options import PeeringOptions
from craft_operator.peering.rule import Verdict, evaluate, malformed, records

logger = logging.getLogger(__name__)

PEERING_GROUP, PEERING_VERSION = "kopf.dev", "v1"
CLUSTER_PEERINGS = Kind(f"{PEERING_GROUP}/{PEERING_VERSION}", "clusterkopfpeerings")

Clock = Callable[[], datetime]


def default_identity() -> str:
    """This replica's identity in the peering object: ``POD_ID`` (the pod's name in the
    manifests), else ``craft-operator@<host>/<random>`` (unique per process)."""
    pod = os.environ.get("POD_ID")
    if pod:
        return pod
    return f"craft-operator@{socket.gethostname()}/{secrets.token_hex(3)}"


def check_interval(lifetime: int) -> float:
    """Seconds between reads of the peering object: a tenth of the lifetime, 0.2 to 5 s."""
    return min(5.0, max(0.2, lifetime / 10))


class PeeringMonitor:
    """Keeps the gate in line with the peering object (see the module docstring)."""

    def __init__(
        self,
        *,
        kube: KubeClient,
        gate: ActivityGate,
        options: PeeringOptions,
        identity: str,
        clock: Clock = lambda: datetime.now(UTC),
        steady: Callable[[], float] = time.monotonic,
    ) -> None:
        assert options.name is not None, "a standalone replica has no peering to monitor"
        self._kube = kube
        self._gate = gate
        self._name = options.name
        self._priority = options.priority
        self._lifetime = options.lifetime
        self._identity = identity
        self._clock = clock
        self._steady = steady
        self._status: Mapping[str, Any] | None = None
        #: The resourceVersion of the version last applied: a poll answered late must not
        #: undo what a newer version, seen in a watch event meanwhile, decided.
        self._version: int | None = None
        #: When the peering object was last read (``steady`` seconds: a wall clock stepped
        #: back must not keep an unreadable peering from ever going stale).
        self._last_read: float | None = None
        self._missing_reported = False
        #: The malformed records last seen (each is logged once, not at every check).
        self._malformed: frozenset[str] = frozenset()
        self._task: asyncio.Task[None] | None = None
        self.interval = check_interval(options.lifetime)

    def wants(self, name: str) -> bool:
        """Whether a peering object is the one this replica peers through."""
        return name == self._name

    def start(self) -> None:
        """Start polling in the running loop."""
        self._task = asyncio.create_task(self._run(), name="peering-monitor")

    async def stop(self) -> None:
        """Stop polling."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def observe(self, body: Mapping[str, Any]) -> None:
        """A version of the peering object seen in a watch event (kopf streams it while active)."""
        if self._take(body):
            await self._apply(self.verdict())

    def _take(self, body: Mapping[str, Any]) -> bool:
        """Keep ``body``'s status as the peering's, unless a newer version was taken already
        (resourceVersions compared as etcd's numbers; one that is none is always taken)."""
        text = str(body.get("metadata", {}).get("resourceVersion", ""))
        version = int(text) if text.isdecimal() else None
        if version is not None and self._version is not None and version < self._version:
            return False
        self._version = version
        self._status = body.get("status") or {}
        self._report_malformed()
        return True

    def _report_malformed(self) -> None:
        """Warn of records the rule skips, each once while it stays: anyone allowed to patch
        the peering object may write one, and nothing removes it (kopf's clean-up of expired
        records does not see it either: :mod:`.kopf_shield`)."""
        found = frozenset(malformed(self._status, self._clock()))
        new = sorted(found - self._malformed)
        self._malformed = found
        if new:
            logger.warning(
                "peering %r: the keep-alive record(s) of %s cannot be read (a lifetime, "
                "priority or lastseen that is no number or date, or runs past year 9999): "
                "taken for expired, by kopf's peering too; remove them with "
                'kubectl patch clusterkopfpeering %s --type=merge -p \'{"status": '
                '{"<identity>": null}}\'',
                self._name,
                ", ".join(new),
                self._name,
            )

    def verdict(self) -> Verdict:
        """kopf's rule over the peering object as last seen, provided this replica's own
        record is in it and live: its peers must see it, or they take over (kopf would go on
        working with an expired record; this replica does not)."""
        now = self._clock()
        own = [peer for peer in records(self._status, now) if peer.identity == self._identity]
        if not own:
            return Verdict(active=False, reason="its own keep-alive is not in the peering yet")
        if not own[0].alive(now):
            return Verdict(active=False, reason="its own keep-alive has expired")
        return evaluate(self._status, identity=self._identity, priority=self._priority, now=now)

    async def check(self) -> None:
        """Read the peering object once and switch the gate accordingly. The read is bounded
        by the poll interval, not the client's request timeout (a minute): a read that hangs,
        on a connection to an API server that went away, counts as a failed one, so that a
        replica whose keep-alive expired meanwhile stops before its peer has worked beside
        it for long."""
        try:
            async with asyncio.timeout(self.interval):
                body = await self._kube.get(CLUSTER_PEERINGS, None, self._name)
        except TimeoutError:
            await self._unreadable(f"no answer within {self.interval:g} s")
            return
        except NotFoundError:
            if not self._missing_reported:
                logger.warning(
                    "ClusterKopfPeering %r does not exist: this replica does nothing until it "
                    "is created (manifests/base/peering.yaml)",
                    self._name,
                )
                self._missing_reported = True
            await self._gate.deactivate(f"peering object {self._name!r} is missing")
            return
        except ApiError as exc:
            await self._unreadable(str(exc))
            return
        self._missing_reported = False
        self._last_read = self._steady()
        if self._take(body):
            await self._apply(self.verdict())

    async def _unreadable(self, why: str) -> None:
        """Step down once the peering has been unreadable for a lifetime, or sooner if its
        own keep-alive, as last seen, has expired: its peers then take it for gone."""
        stale = self._last_read is None or (self._steady() - self._last_read > self._lifetime)
        logger.warning("cannot read peering object %r: %s", self._name, why)
        if stale or not self.verdict().active:
            await self._gate.deactivate(f"peering object {self._name!r} cannot be read")

    async def _apply(self, verdict: Verdict) -> None:
        if verdict.active:
            try:
                await self._gate.activate(f"{verdict.describe()} in peering {self._name!r}")
            except ApiError as exc:
                logger.warning("cannot take over yet, listing failed: %s", exc)
        else:
            await self._gate.deactivate(f"peering {self._name!r} prefers {verdict.describe()}")

    async def _run(self) -> None:
        # The monitor starts with the operator's start-up handlers, before kopf's login: a
        # read before it could only fail (and be logged as a warning at every start).
        await self._kube.connected.wait()
        while True:
            try:
                await self.check()
            except Exception:
                # Stay in the loop: a monitor that died would leave the gate as it is.
                logger.exception("peering check failed unexpectedly")
            await asyncio.sleep(self.interval)
