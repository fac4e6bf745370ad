"""kopf's own peering observer, kept from keep-alive records it cannot read.

kopf reads every record in the peering object at every event, and one it cannot read (a
lifetime that runs past the year 9999, a lastseen that is no date, a priority that is no
number) raises out of its peering observer, which stops the whole operator, and again at
every start while the record stays: anyone allowed to patch the peering object could keep
every replica down. The operator's rule skips such records
(:func:`craft_operator.peering.rule.malformed`, which the monitor logs); :func:`install`
hands kopf the peering object without them too, so that both see the same peers.

kopf has no hook for this: the wrapper replaces ``process_peering_event`` in kopf's peering
module, which kopf looks up when it starts its peering (``tests/unit/peering/test_rule.py``
fails if kopf moves it).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from kopf._core.engines import peering as kopf_peering

from craft_operator.peering.rule import malformed

Process = Callable[..., Awaitable[Any]]


def readable(status: Mapping[str, Any], now: datetime) -> dict[str, Any]:
    """``status`` without the records that the rule or kopf cannot read."""
    skipped = set(malformed(status, now))
    return {
        identity: info
        for identity, info in status.items()
        if identity not in skipped and _kopf_reads(identity, info)
    }


def _kopf_reads(identity: str, info: Mapping[str, Any]) -> bool:
    """Whether kopf parses the record (its date parser is not the rule's)."""
    try:
        kopf_peering.Peer(identity=kopf_peering.Identity(identity), **info)
    except Exception:
        return False
    return True


def shielded(process: Process) -> Process:
    """``process`` (kopf's ``process_peering_event``), fed only the readable records."""

    async def process_peering_event(*, raw_event: Mapping[str, Any], **kwargs: Any) -> Any:
        body = raw_event.get("object") or {}
        status = body.get("status")
        if isinstance(status, Mapping):
            kept = readable(status, datetime.now(UTC))
            if len(kept) != len(status):
                raw_event = {**raw_event, "object": {**body, "status": kept}}
        return await process(raw_event=raw_event, **kwargs)

    process_peering_event.craft_shielded = True  # type: ignore[attr-defined]
    return process_peering_event


def install() -> None:
    """Shield kopf's peering observer (once; before kopf starts its peering)."""
    if not getattr(kopf_peering.process_peering_event, "craft_shielded", False):
        shield = shielded(kopf_peering.process_peering_event)
        kopf_peering.process_peering_event = shield  # type: ignore[assignment]  # same call
