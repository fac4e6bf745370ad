"""The Kubernetes API access the operator needs, as data, and where each grant lives.

The grants on the kinds the operator watches come from their rows in the registry
(:mod:`craft_operator.kube.kinds`); the rest are listed here. The manifests are not part
of the Python package, so ``craft-operator doctor`` and the
start-up check of ``craft-operator run`` use this copy; unit tests keep the two equal
(change both together):

- :data:`CLUSTER_PERMISSIONS`: the ClusterRole ``craft-operator`` of ``manifests/base``;
  only what is cluster-scoped (the peering object, the CraftSandboxPolicy, namespaces'
  tenant labels).
- :data:`OPERATOR_NAMESPACE_PERMISSIONS`: the Role ``craft-operator`` of
  ``manifests/base`` in the operator's own namespace (the SKILL.md template).
- :data:`SANDBOX_NAMESPACE_PERMISSIONS`: the Role ``craft-operator`` that
  ``manifests/sandbox-namespace`` puts in every sandbox namespace the operator serves.
- :data:`ALL_NAMESPACES_PERMISSIONS`: the ClusterRole of
  ``manifests/overlays/all-namespaces``, for an operator that serves every namespace.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from craft_operator.kube import kinds


@dataclass(frozen=True, order=True)
class Permission:
    """One RBAC grant: ``verb`` on ``resource`` (``plural`` or ``plural/subresource``)."""

    group: str
    resource: str
    verb: str
    #: Cluster-scoped resources are checked once, not per watched namespace.
    namespaced: bool = True

    @property
    def plural(self) -> str:
        """The resource without its subresource."""
        return self.resource.partition("/")[0]

    @property
    def subresource(self) -> str:
        """The subresource (``status``, ``exec``), or ``""``."""
        return self.resource.partition("/")[2]

    def describe(self) -> str:
        """``verb resource[.group]``, as ``kubectl auth can-i`` spells it."""
        return f"{self.verb} {self.resource}" + (f".{self.group}" if self.group else "")


#: Where an access is asked for: a namespace, or ``None`` for cluster-wide.
Scope = str | None
AccessRequest = tuple[Permission, Scope]


def _grants(
    group: str, resources: tuple[str, ...], verbs: tuple[str, ...], *, namespaced: bool = True
) -> tuple[Permission, ...]:
    return tuple(
        Permission(group, resource, verb, namespaced) for resource in resources for verb in verbs
    )


def _kind_grants(*, namespaced: bool) -> tuple[Permission, ...]:
    """The grants of the registry's kinds (:mod:`craft_operator.kube.kinds`) of one scope."""
    return tuple(
        permission
        for kind in kinds.KINDS
        if kind.api.namespaced == namespaced
        for permission in _grants(
            kind.api.group, (kind.api.plural,), kind.verbs, namespaced=namespaced
        )
    )


#: The ClusterRole ``craft-operator`` in ``manifests/base/rbac.yaml``.
CLUSTER_PERMISSIONS: tuple[Permission, ...] = (
    # Active/standby peering: kopf's keep-alives, and the operator's reads of them.
    *_grants(
        "kopf.dev", ("clusterkopfpeerings",), ("get", "list", "watch", "patch"), namespaced=False
    ),
    # The policy check: the CraftSandboxPolicy and the namespaces' tenant labels.
    *_kind_grants(namespaced=False),
)

#: The Role ``craft-operator`` in craft-system, in ``manifests/base/rbac.yaml``.
OPERATOR_NAMESPACE_PERMISSIONS: tuple[Permission, ...] = (
    # The platform's SKILL.md template (CRAFT_SKILL_TEMPLATE_CONFIGMAP).
    Permission("", "configmaps", "get"),
)

#: The Role ``craft-operator`` in ``manifests/sandbox-namespace/rbac.yaml``.
SANDBOX_NAMESPACE_PERMISSIONS: tuple[Permission, ...] = (
    # The sandboxes, their children and the NetworkPolicies: the registry's namespaced kinds.
    *_kind_grants(namespaced=True),
    *_grants("craft.onyx.app", ("craftsandboxes/status",), ("patch",)),
    # blockOwnerDeletion on the children (OwnerReferencesPermissionEnforcement).
    *_grants("craft.onyx.app", ("craftsandboxes/finalizers",), ("update",)),
    # Warm pools: their status, and blockOwnerDeletion on their unclaimed pods.
    *_grants("craft.onyx.app", ("craftsandboxpools/status",), ("patch",)),
    *_grants("craft.onyx.app", ("craftsandboxpools/finalizers",), ("update",)),
    *_grants("", ("pods/exec",), ("get", "create")),
    # patch: a repeated event counts up in the stored one (a series), not a new Event.
    *_grants("", ("events",), ("create", "patch")),
)

#: The ClusterRole ``craft-operator-all-namespaces`` of ``manifests/overlays/all-namespaces``.
ALL_NAMESPACES_PERMISSIONS: tuple[Permission, ...] = (
    # A cluster-wide kopf discovers the custom resources and notices CRDs being added.
    *_grants(
        "apiextensions.k8s.io", ("customresourcedefinitions",), ("list", "watch"), namespaced=False
    ),
    *SANDBOX_NAMESPACE_PERMISSIONS,
)


def access_requests(
    namespaces: Sequence[str],
    *,
    peering: bool = True,
    template_namespace: str | None = None,
) -> list[AccessRequest]:
    """Every access the operator needs, and where (pure).

    Scoped to ``namespaces``: the sandbox namespace Role's grants in each of them; serving
    all namespaces (``namespaces`` empty): the all-namespaces grants, cluster-wide. The
    policy's cluster-scoped reads always, the peering object's grants when ``peering``,
    and reading the SKILL.md template's ConfigMap where it lives (unless a served
    namespace's Role grants that already).
    """
    requests: list[AccessRequest] = []
    requests += [
        (permission, None)
        for permission in CLUSTER_PERMISSIONS
        if peering or permission.group != "kopf.dev"
    ]
    if namespaces:
        requests += [
            (permission, namespace)
            for permission in SANDBOX_NAMESPACE_PERMISSIONS
            for namespace in namespaces
        ]
    else:
        requests += [(permission, None) for permission in ALL_NAMESPACES_PERMISSIONS]
    if template_namespace is not None and namespaces and template_namespace not in namespaces:
        requests += [
            (permission, template_namespace) for permission in OPERATOR_NAMESPACE_PERMISSIONS
        ]
    return requests
