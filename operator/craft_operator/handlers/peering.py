"""Peering wiring: one cluster-wide peering object, the monitor, and the object kopf streams."""

from __future__ import annotations

from typing import Any

import kopf

from craft_operator.peering import kopf_shield
from craft_operator.peering.monitor import (
    CLUSTER_PEERINGS,
    PEERING_GROUP,
    PEERING_VERSION,
    PeeringMonitor,
)


def register(registry: kopf.OperatorRegistry, monitor: PeeringMonitor) -> None:
    """Register the monitor's start, stop and watch handlers (only for a peered replica)."""
    kopf_shield.install()  # a malformed keep-alive record must not stop kopf

    async def start_peering_monitor(settings: kopf.OperatorSettings, **_: Any) -> None:
        # kopf would peer through a KopfPeering per namespace when the operator watches only
        # some; one ClusterKopfPeering serves every scope (kopf reads this setting when its
        # peering starts, after the start-up handlers).
        settings.peering.clusterwide = True
        monitor.start()

    async def stop_peering_monitor(**_: Any) -> None:
        await monitor.stop()

    async def peering_event(event: kopf.RawEvent, **_: Any) -> None:
        if event["type"] != "DELETED":
            await monitor.observe(event["object"])

    def ours(name: str, **_: Any) -> bool:
        return monitor.wants(name)

    kopf.on.startup(registry=registry, id="start-peering-monitor")(start_peering_monitor)
    kopf.on.cleanup(registry=registry, id="stop-peering-monitor")(stop_peering_monitor)
    kopf.on.event(
        PEERING_GROUP,
        PEERING_VERSION,
        CLUSTER_PEERINGS.plural,
        registry=registry,
        id="peering-event",
        when=ours,
    )(peering_event)
