"""The operator's RBAC, checked against the API requests it is seen to make.

Every integration test records which (verb, API group, resource) the operator used; each
must be granted by the ClusterRole in ``manifests/base/rbac.yaml``, and
``tests/integration/test_rbac.py`` checks the other direction: every grant is used.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml
from kmock._internal import rendering

RBAC_PATH = Path(__file__).resolve().parents[2] / "manifests" / "base" / "rbac.yaml"
Access = tuple[str, str, str]  # (verb, apiGroup, resource or resource/subresource)

_METHOD_VERBS = {"POST": "create", "PUT": "update", "PATCH": "patch"}


def access_of(request: rendering.Request) -> Access | None:
    """The RBAC access a request needs; ``None`` for discovery (granted to everyone)."""
    resource = request.resource
    if resource is None or resource.plural is None:
        return None
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


def cluster_role_rules(path: Path = RBAC_PATH) -> list[Mapping[str, Any]]:
    """The rules of the operator's ClusterRole."""
    for document in yaml.safe_load_all(path.read_text(encoding="utf-8")):
        if document and document.get("kind") == "ClusterRole":
            return list(document["rules"])
    raise LookupError(f"no ClusterRole in {path}")


def grants(rules: Iterable[Mapping[str, Any]]) -> set[Access]:
    """Every (verb, group, resource) the rules grant (no wildcards are used, or allowed)."""
    granted: set[Access] = set()
    for rule in rules:
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                for verb in rule["verbs"]:
                    if "*" in (group, resource, verb):
                        raise AssertionError(f"wildcard in the operator's RBAC: {rule}")
                    granted.add((verb, group, resource))
    return granted
