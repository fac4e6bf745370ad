"""kopf's peering rule, as a pure function of the peering object's status.

kopf keeps one record per replica in the peering object's ``status``:
``{identity: {priority, lifetime, lastseen}}``. A replica pauses while any *live* other
replica (``lastseen + lifetime`` in the future) has a higher priority, or the same one;
otherwise it works. This module applies the same rule so that the operator's own work queue
pauses when kopf pauses its watch streams (``tests/unit/peering/test_rule.py`` checks the two
agree, and fails if kopf changes the rule).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

#: kopf assumes this lifetime for records that do not state theirs.
DEFAULT_LIFETIME = 60


@dataclass(frozen=True)
class PeerRecord:
    """One replica's keep-alive record."""

    identity: str
    priority: int
    deadline: datetime

    def alive(self, now: datetime) -> bool:
        """Whether the record is still valid at ``now``."""
        return self.deadline > now


@dataclass(frozen=True)
class Verdict:
    """What the rule says for this replica at one moment."""

    active: bool
    #: Live replicas that keep this one paused (higher or equal priority).
    blockers: tuple[PeerRecord, ...] = ()
    #: Why it is paused if not for blockers.
    reason: str = ""

    def describe(self) -> str:
        """For logs: who or what keeps this replica paused, or that nothing does."""
        if self.reason:
            return self.reason
        if not self.blockers:
            return "no live peer with a higher or equal priority"
        return ", ".join(f"{peer.identity} (priority {peer.priority})" for peer in self.blockers)


def _parse_time(text: Any, now: datetime) -> datetime:
    if text is None:
        return now  # kopf treats a record without lastseen as seen just now
    if not isinstance(text, str):
        raise TypeError(f"lastseen {text!r} is no date")  # kopf fails on it too
    parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)


def _number(value: Any) -> int:
    """A priority as kopf compares it: a number (a string compared with one fails)."""
    if isinstance(value, str):
        raise TypeError(f"priority {value!r} is no number")
    return int(value)


def records(status: Mapping[str, Any] | None, now: datetime) -> list[PeerRecord]:
    """The records in a peering object's status (malformed ones are skipped)."""
    found: list[PeerRecord] = []
    for identity, info in (status or {}).items():
        if not isinstance(info, Mapping) or "identity" in info:
            continue  # kopf passes the fields as keywords, beside the key as the identity
        try:
            lastseen = _parse_time(info.get("lastseen"), now)
            lifetime = timedelta(seconds=int(info.get("lifetime", DEFAULT_LIFETIME)))
            priority = _number(info.get("priority", 0))
            expires = lastseen + lifetime
        except (TypeError, ValueError, OverflowError):  # past datetime's range too
            continue
        found.append(PeerRecord(str(identity), priority, expires))
    return found


def malformed(status: Mapping[str, Any] | None, now: datetime) -> list[str]:
    """The identities of the records :func:`records` skips as malformed, sorted."""
    kept = {peer.identity for peer in records(status, now)}
    return sorted(str(identity) for identity in (status or {}) if str(identity) not in kept)


def evaluate(
    status: Mapping[str, Any] | None, *, identity: str, priority: int, now: datetime
) -> Verdict:
    """Whether the replica ``identity`` with ``priority`` may work, by kopf's rule."""
    blockers = tuple(
        peer
        for peer in records(status, now)
        if peer.identity != identity and peer.alive(now) and peer.priority >= priority
    )
    return Verdict(active=not blockers, blockers=blockers)
