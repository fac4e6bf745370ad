"""Whether a namespace exists, asked live: the watch cache may not have seen one made a
moment ago, and a namespace taken for gone has its PATs revoked and its watches excused."""

from __future__ import annotations

from enum import StrEnum
from typing import Any, Protocol

from craft_operator.kube.client import Kind
from craft_operator.kube.kinds import NAMESPACE

#: The label the API server gives every namespace: its name (immutable).
NAME_LABEL = "kubernetes.io/metadata.name"


class NamespaceState(StrEnum):
    """What a live read says of a namespace."""

    ACTIVE = "Active"
    TERMINATING = "Terminating"
    GONE = "Gone"


class NamespaceLister(Protocol):
    """What the lookup needs of the API client: a list by label selector."""

    async def list(
        self, kind: Kind, namespace: str | None, *, label_selector: str | None = None
    ) -> list[dict[str, Any]]:
        """The objects of a kind (of a namespace), by label selector."""
        ...


async def namespace_state(kube: NamespaceLister, name: str) -> NamespaceState:
    """The namespace ``name`` as the API server has it now (listed by its name label: the
    operator's ClusterRole lists and watches namespaces, and gets none); an answer that
    names another namespace is not taken for it."""
    items = await kube.list(NAMESPACE.api, None, label_selector=f"{NAME_LABEL}={name}")
    found = [item for item in items if (item.get("metadata") or {}).get("name") == name]
    if not found:
        return NamespaceState.GONE
    if found[0]["metadata"].get("deletionTimestamp"):
        return NamespaceState.TERMINATING
    return NamespaceState.ACTIVE
