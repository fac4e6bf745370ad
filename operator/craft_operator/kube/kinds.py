"""The one registry of the kinds the operator watches, caches and may touch.

Each row says, for one kind: its name (also its name in the cache), where it lives in the
API, whether its watch is filtered to the operator's own objects, the RBAC verbs the
operator is granted on it, and whether it is a sandbox's child (deleted by the finalizer
and by a policy withdrawal). The kopf watches, their server-side label selectors, the
peering gate's relist, the finalizer, the policy's withdrawal and the packaged RBAC
(:mod:`craft_operator.permissions`, which tests compare with the manifests) all read it,
so adding a child kind is one row here, plus its grant in the RBAC manifests.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from craft_operator.api import models
from craft_operator.api import pool as pools
from craft_operator.api.constants import LABEL_SANDBOX
from craft_operator.kube.cache import ObjectCache


@dataclass(frozen=True)
class Kind:
    """Where a kind lives in the API: its group/version path and plural."""

    api_version: str
    plural: str
    #: False for cluster-scoped kinds (listed once, never per namespace).
    namespaced: bool = True

    @property
    def group(self) -> str:
        """The API group (``""`` for the core group), as RBAC rules spell it."""
        group, _, _ = self.api_version.rpartition("/")
        return group

    @property
    def resource(self) -> tuple[str, ...]:
        """The kind as kopf names a resource: ``(group, version, plural)``, core without group."""
        return (*self.api_version.split("/"), self.plural)

    def path(self, namespace: str | None, name: str | None = None, sub: str | None = None) -> str:
        """The URL path of a collection or an object (and optionally a subresource)."""
        base = "/api/v1" if self.api_version == "v1" else f"/apis/{self.api_version}"
        path = (
            f"{base}/namespaces/{namespace}/{self.plural}" if namespace else f"{base}/{self.plural}"
        )
        if name:
            path += f"/{name}"
        if sub:
            path += f"/{sub}"
        return path


MANAGED_BY = "craft-operator"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
#: Suffixes of the children named after their CraftSandbox (``<name><suffix>``).
SECRET_SUFFIX = "-credentials"  # noqa: S105 -- a name suffix, not a secret
SKILLS_SUFFIX = "-skills"
LIBRARY_SUFFIX = "-library"
WORKSPACE_SUFFIX = "-workspace"
#: The label selector of the watches of the operator's own objects.
MANAGED = f"{LABEL_MANAGED_BY}={MANAGED_BY}"
_CHILD_VERBS = ("get", "list", "watch", "create", "patch", "delete")


@dataclass(frozen=True)
class CachedKind:
    """One kind the operator watches into its cache (a row of :data:`KINDS`)."""

    #: The kind, and its name in the cache.
    name: str
    api: Kind
    #: The RBAC verbs granted on it: in each sandbox namespace if namespaced, else cluster-wide.
    verbs: tuple[str, ...]
    #: Watch (and relist) only the objects labelled as the operator's.
    managed_only: bool = False
    #: A sandbox's child: deleted with it, and when the policy withdraws it.
    child: bool = False
    #: The children of this kind named ``<sandbox name><suffix>``, one per suffix (the PVCs:
    #: the library volume and the workspace); ``None``: any number, found in the cache by
    #: their owner reference.
    name_suffixes: tuple[str, ...] | None = None

    @property
    def selector(self) -> str | None:
        """The label selector of its watch and relist, if it is filtered."""
        return MANAGED if self.managed_only else None

    @property
    def labels(self) -> dict[str, str]:
        """The same filter as kopf's ``labels=`` takes it."""
        return {LABEL_MANAGED_BY: MANAGED_BY} if self.managed_only else {}


def _child(
    name: str, api: Kind, suffixes: tuple[str, ...] | None, verbs: tuple[str, ...]
) -> CachedKind:
    return CachedKind(name, api, verbs, managed_only=True, child=True, name_suffixes=suffixes)


# Every NetworkPolicy counts (the platform may restrict the egress with its own).
NETWORK_POLICY = CachedKind(
    "NetworkPolicy", Kind("networking.k8s.io/v1", "networkpolicies"), ("list", "watch")
)
# get: the orphan sweep confirms a sandbox is gone before it revokes its PAT.
SANDBOX = CachedKind(
    models.KIND, Kind(models.API_VERSION, models.PLURAL), ("get", "list", "watch", "patch")
)
POD = _child("Pod", Kind("v1", "pods"), ("",), _CHILD_VERBS)
SECRET = _child("Secret", Kind("v1", "secrets"), (SECRET_SUFFIX,), _CHILD_VERBS)
CONFIGMAP = _child("ConfigMap", Kind("v1", "configmaps"), (SKILLS_SUFFIX,), _CHILD_VERBS)
# The library volume (Job mode; the sync Jobs fill it) and the workspace (spec.workspace).
PVC = _child(
    "PVC", Kind("v1", "persistentvolumeclaims"), (LIBRARY_SUFFIX, WORKSPACE_SUFFIX), _CHILD_VERBS
)
JOB = _child("Job", Kind("batch/v1", "jobs"), None, ("get", "list", "watch", "create", "delete"))
# Warm pools: watched; their pods are Pods above (filtered by the same label), their status
# is written through the status subresource (see craft_operator.permissions).
POOL = CachedKind(pools.POOL_KIND, Kind(models.API_VERSION, pools.POOL_PLURAL), ("list", "watch"))
# What the policy check reads (cluster-scoped).
POLICY = CachedKind(
    "CraftSandboxPolicy",
    Kind(models.API_VERSION, "craftsandboxpolicies", namespaced=False),
    ("list", "watch"),
)
NAMESPACE = CachedKind("Namespace", Kind("v1", "namespaces", namespaced=False), ("list", "watch"))

#: Every cached kind, in the order an activated replica lists them: the NetworkPolicies
#: first (a sandbox must not look unprotected for want of them), the policy's reads last.
KINDS: tuple[CachedKind, ...] = (
    NETWORK_POLICY,
    SANDBOX,
    POD,
    SECRET,
    CONFIGMAP,
    PVC,
    JOB,
    POOL,
    POLICY,
    NAMESPACE,
)
#: A sandbox's children, in the order the finalizer deletes them (the pod first).
CHILDREN: tuple[CachedKind, ...] = tuple(kind for kind in KINDS if kind.child)
BY_NAME: dict[str, CachedKind] = {kind.name: kind for kind in KINDS}


def child_targets(
    cache: ObjectCache, namespace: str | None, name: str, owned: Callable[[Mapping[str, Any]], bool]
) -> list[tuple[CachedKind, str]]:
    """The children of the sandbox ``name`` to delete, in the order of :data:`CHILDREN`.

    A named child by its name, whether the cache holds it or not (a sandbox whose spec no
    longer parses must still be cleaned up); of the other kinds, the cached objects in the
    namespace that ``owned`` says are the sandbox's. The caller still checks the owner of a
    named child before deleting it.
    """
    targets: list[tuple[CachedKind, str]] = []
    for kind in CHILDREN:
        if kind.name_suffixes is not None:
            named = [name + suffix for suffix in kind.name_suffixes]
            # And one labelled as the sandbox's under another name: a claimed pool pod.
            labelled = cache.labelled(kind.name, namespace, LABEL_SANDBOX, name)
            named += [
                found["metadata"]["name"]
                for found in labelled
                if found["metadata"]["name"] not in named and owned(found)
            ]
            targets += [(kind, child) for child in named]
            continue
        targets += [
            (kind, obj["metadata"]["name"])
            for obj in cache.in_namespace(kind.name, namespace)
            if owned(obj)
        ]
    return targets
