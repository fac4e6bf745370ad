"""The Kubernetes API access the operator needs: its ClusterRole, as data.

``manifests/base/rbac.yaml`` is not part of the Python package, so ``craft-operator doctor``
checks this copy; a unit test keeps the two equal (change both together).
"""

from __future__ import annotations

from dataclasses import dataclass


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


def _grants(
    group: str, resources: tuple[str, ...], verbs: tuple[str, ...], *, namespaced: bool = True
) -> tuple[Permission, ...]:
    return tuple(
        Permission(group, resource, verb, namespaced) for resource in resources for verb in verbs
    )


_CHILD_VERBS = ("get", "list", "watch", "create", "patch", "delete")

#: Every grant of the ``craft-operator`` ClusterRole in ``manifests/base/rbac.yaml``.
REQUIRED_PERMISSIONS: tuple[Permission, ...] = (
    *_grants(
        "apiextensions.k8s.io", ("customresourcedefinitions",), ("list", "watch"), namespaced=False
    ),
    # get: the orphan sweep confirms a sandbox is gone before it revokes its PAT.
    *_grants("craft.onyx.app", ("craftsandboxes",), ("get", "list", "watch", "patch")),
    *_grants("craft.onyx.app", ("craftsandboxes/status",), ("patch",)),
    # blockOwnerDeletion on the children (OwnerReferencesPermissionEnforcement).
    *_grants("craft.onyx.app", ("craftsandboxes/finalizers",), ("update",)),
    *_grants("", ("pods", "secrets"), _CHILD_VERBS),
    *_grants("", ("configmaps",), _CHILD_VERBS),
    # Job mode of the user library: the library volume and the sync Jobs.
    *_grants("", ("persistentvolumeclaims",), _CHILD_VERBS),
    *_grants("batch", ("jobs",), ("get", "list", "watch", "create", "delete")),
    *_grants("", ("pods/exec",), ("get", "create")),
    *_grants("", ("events",), ("create",)),
    # Active/standby peering: kopf's keep-alives, and the operator's reads of them.
    *_grants(
        "kopf.dev", ("clusterkopfpeerings",), ("get", "list", "watch", "patch"), namespaced=False
    ),
)
