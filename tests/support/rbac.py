"""The operator's RBAC, checked against the API requests it is seen to make.

Two installs grant it: the default, namespaced one (the ClusterRole and craft-system Role of
``manifests/base`` plus the Role of ``manifests/sandbox-namespace`` in each sandbox
namespace), and the all-namespaces overlay (``manifests/overlays/all-namespaces``). Every
integration test records which (verb, API group, resource) the operator used; each must be
granted, and ``tests/integration/test_rbac.py`` checks the other direction for both
installs: every grant is used.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from enum import StrEnum
from pathlib import Path
from typing import Any

import yaml
from kmock._internal import rendering

MANIFESTS = Path(__file__).resolve().parents[2] / "manifests"
RBAC_PATH = MANIFESTS / "base" / "rbac.yaml"
SANDBOX_RBAC_PATH = MANIFESTS / "sandbox-namespace" / "rbac.yaml"
ALL_NAMESPACES_RBAC_PATH = MANIFESTS / "overlays" / "all-namespaces" / "clusterrole.yaml"
Access = tuple[str, str, str]  # (verb, apiGroup, resource or resource/subresource)

_METHOD_VERBS = {"POST": "create", "PUT": "update", "PATCH": "patch"}


class Install(StrEnum):
    """How the operator's RBAC is installed."""

    NAMESPACED = "namespaced"
    ALL_NAMESPACES = "all-namespaces"


def access_of(request: rendering.Request) -> Access | None:
    """The RBAC access a request needs; ``None`` for what everyone is granted (discovery,
    access reviews of oneself)."""
    resource = request.resource
    if resource is None or resource.plural is None:
        return None
    if resource.group == "authorization.k8s.io" and resource.plural.startswith("selfsubject"):
        return None  # everyone may ask what they may do (system:basic-user)
    name = resource.plural + (f"/{request.subresource}" if request.subresource else "")
    method = request.method.value.upper()
    if method == "GET":
        if request.params.get("watch") in ("true", "1"):
            verb = "watch"
        else:
            verb = "get" if request.name else "list"
    elif method == "DELETE":
        verb = "delete" if request.name else "deletecollection"
    else:
        verb = _METHOD_VERBS.get(method, method.lower())
    return verb, resource.group or "", name


def role_rules(path: Path, kind: str, namespace: str | None = None) -> list[Mapping[str, Any]]:
    """The rules of the one ``kind`` (Role, ClusterRole) in ``path`` (in ``namespace``)."""
    found = [
        document
        for document in yaml.safe_load_all(path.read_text(encoding="utf-8"))
        if document
        and document.get("kind") == kind
        and document["metadata"].get("namespace") == namespace
    ]
    if len(found) != 1:
        raise LookupError(f"expected one {kind} in {path}, found {len(found)}")
    return list(found[0]["rules"])


def cluster_role_rules(path: Path = RBAC_PATH) -> list[Mapping[str, Any]]:
    """The rules of the operator's ClusterRole in the base (cluster-scoped grants only)."""
    return role_rules(path, "ClusterRole")


def sandbox_role_rules() -> list[Mapping[str, Any]]:
    """The rules of the Role each sandbox namespace gets from ``manifests/sandbox-namespace``."""
    return role_rules(SANDBOX_RBAC_PATH, "Role")


def install_rules(install: Install) -> list[Mapping[str, Any]]:
    """Every rule granted to the operator by ``install``, whatever its scope."""
    base = [*cluster_role_rules(), *role_rules(RBAC_PATH, "Role", "craft-system")]
    if install is Install.NAMESPACED:
        return [*base, *sandbox_role_rules()]
    return [*base, *role_rules(ALL_NAMESPACES_RBAC_PATH, "ClusterRole")]


def grants(rules: Iterable[Mapping[str, Any]]) -> set[Access]:
    """Every (verb, group, resource) the rules grant (no wildcards are used, or allowed)."""
    granted: set[Access] = set()
    for rule in rules:
        if rule.get("resourceNames"):
            raise AssertionError(f"resourceNames are not modelled here: {rule}")
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                for verb in rule["verbs"]:
                    if "*" in (group, resource, verb):
                        raise AssertionError(f"wildcard in the operator's RBAC: {rule}")
                    granted.add((verb, group, resource))
    return granted
