"""How this replica takes part in kopf peering: the peering name, its priority, its identity.

Two replicas of the operator form an active/standby pair through one kopf peering object:
the replica with the higher priority works, the other one waits. kopf pauses *both* replicas
when their priorities are equal, so the priorities must differ. In a StatefulSet they do
without per-pod configuration: with ``--priority-from-ordinal`` the pod ``<name>-<k>`` gets
``base - k`` (``craft-operator-0`` is preferred over ``craft-operator-1``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from craft_operator.config import DNS_SUBDOMAIN_PATTERN

#: Where the pod's own name is expected (the downward API sets it in the manifests).
POD_NAME_VARIABLE = "POD_NAME"
_ORDINAL = re.compile(r"^.+-(?P<ordinal>0|[1-9][0-9]*)$")


class PeeringError(ValueError):
    """The peering options contradict each other or have bad values."""


@dataclass(frozen=True)
class PeeringOptions:
    """Peering of this replica; ``name=None`` means standalone (no peering at all)."""

    name: str | None = None
    priority: int = 0
    #: kopf's identity of this replica in the peering object; None: kopf's default
    #: (``POD_ID``, else user@host with a start time).
    identity: str | None = None
    #: Seconds a replica's keep-alive stays valid: how long a dead active replica blocks
    #: its standby.
    lifetime: int = 60

    @property
    def standalone(self) -> bool:
        """Whether the replica runs without peering."""
        return self.name is None


def ordinal_of(pod_name: str) -> int:
    """The StatefulSet ordinal at the end of a pod name (``craft-operator-1`` → 1)."""
    match = _ORDINAL.match(pod_name)
    if match is None:
        raise PeeringError(
            f"cannot derive a priority from pod name {pod_name!r}: it does not end in "
            "-<ordinal> (run the operator as a StatefulSet, or pass --priority)"
        )
    return int(match["ordinal"])


def resolve_peering(
    *,
    name: str | None,
    priority: int,
    from_ordinal: bool = False,
    standalone: bool = False,
    pod_name: str | None = None,
    identity: str | None = None,
    lifetime: int = 60,
) -> PeeringOptions:
    """Combine the options and settings into :class:`PeeringOptions`, or raise PeeringError.

    ``priority`` is the replica's priority, or with ``from_ordinal`` the base from which the
    pod's ordinal (from ``pod_name``) is subtracted.
    """
    if standalone:
        if name:
            raise PeeringError(
                f"--standalone contradicts peering {name!r} (from --peering or "
                "CRAFT_PEERING_NAME): use one of them"
            )
        if from_ordinal:
            raise PeeringError("--priority-from-ordinal needs peering, not --standalone")
        return PeeringOptions()
    if not name:
        if from_ordinal:
            raise PeeringError(
                "--priority-from-ordinal needs a peering name (--peering or CRAFT_PEERING_NAME)"
            )
        return PeeringOptions()
    if len(name) > 253 or not re.match(DNS_SUBDOMAIN_PATTERN, name):
        raise PeeringError(
            f"peering name {name!r} is not a valid object name (lower-case letters, digits, "
            "'-' and '.')"
        )
    if lifetime < 1:
        raise PeeringError(f"the peering lifetime must be at least 1 second, not {lifetime}")
    if from_ordinal:
        if not pod_name:
            raise PeeringError(
                f"--priority-from-ordinal needs the pod's name in {POD_NAME_VARIABLE} "
                "(set it from the downward API: fieldRef metadata.name)"
            )
        priority -= ordinal_of(pod_name)
    return PeeringOptions(name=name, priority=priority, identity=identity, lifetime=lifetime)
