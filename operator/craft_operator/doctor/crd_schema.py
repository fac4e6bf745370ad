"""Whether the installed CRDs declare every field this operator reads and writes.

An install that upgraded the operator without ``kubectl apply -k crds`` keeps an older
CRD: the API server serves it, but prunes every field it does not declare, from specs
(a setting the user wrote is lost without an error) and from the operator's status writes
(``status.admittedImages`` among them: a pod a mutating webhook changed is then replaced
after each operator restart). ``doctor`` compares the schemas the API server publishes
(its OpenAPI v3 document of the group version, which any authenticated identity may read:
the operator's own needs no grant on CRDs) with the operator's.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from craft_operator.api.crd import build_crd
from craft_operator.api.pool_crd import build_pool_crd
from craft_operator.kube.client import ApiError, KubeClient
from craft_operator.policy.crd import build_policy_crd

#: The operator's CRDs, as ``craft-operator crd`` builds them.
BUILDERS: tuple[Callable[[], dict[str, Any]], ...] = (build_crd, build_pool_crd, build_policy_crd)
#: Fields named in a finding; the rest are counted.
NAMED = 5


def missing_fields(ours: Mapping[str, Any], theirs: Mapping[str, Any], path: str = "") -> list[str]:
    """The fields schema ``ours`` declares that ``theirs`` does not (so prunes), by path;
    nothing below a node ``theirs`` keeps unknown fields of."""
    if theirs.get("x-kubernetes-preserve-unknown-fields"):
        return []
    missing: list[str] = []
    declared = theirs.get("properties") or {}
    for key, schema in (ours.get("properties") or {}).items():
        field = f"{path}.{key}" if path else key
        if key in declared:
            missing += missing_fields(schema, declared[key], field)
        else:
            missing.append(field)
    for nested, suffix in (("items", "[]"), ("additionalProperties", ".*")):
        mine, its = ours.get(nested), theirs.get(nested)
        if isinstance(mine, Mapping) and isinstance(its, Mapping):
            missing += missing_fields(mine, its, path + suffix)
    return missing


def published_schema(document: Mapping[str, Any], group: str, version: str, kind: str) -> Any:
    """The schema an OpenAPI v3 document publishes for ``kind`` at ``group``/``version``."""
    for schema in (document.get("components") or {}).get("schemas", {}).values():
        for gvk in schema.get("x-kubernetes-group-version-kind") or []:
            if (gvk.get("group"), gvk.get("version"), gvk.get("kind")) == (group, version, kind):
                return schema
    return None


def stale_fields(wanted: Mapping[str, Any], document: Mapping[str, Any]) -> list[str]:
    """The fields of CRD ``wanted``'s served version that the API server's published
    schema lacks (none if it publishes no schema of the kind: discovery says so first)."""
    spec = wanted["spec"]
    version = spec["versions"][0]
    published = published_schema(document, spec["group"], version["name"], spec["names"]["kind"])
    if published is None:
        return []
    return missing_fields(version["schema"]["openAPIV3Schema"], published)


async def stale_crds(kube: KubeClient) -> tuple[dict[str, list[str]], str | None]:
    """Each of the operator's CRDs whose served schema lacks fields, with them; and why the
    schemas could not be read (an API server that publishes no OpenAPI v3), if so."""
    documents: dict[str, Mapping[str, Any]] = {}
    stale: dict[str, list[str]] = {}
    for build in BUILDERS:
        wanted = build()
        path = f"/openapi/v3/apis/{wanted['spec']['group']}/{wanted['spec']['versions'][0]['name']}"
        if path not in documents:
            try:
                documents[path] = await kube.request("GET", path)
            except ApiError as exc:
                return stale, f"{exc.status} {exc.reason}"
        lacking = stale_fields(wanted, documents[path])
        if lacking:
            stale[wanted["metadata"]["name"]] = lacking
    return stale, None


def describe_stale(stale: Mapping[str, list[str]]) -> str:
    """One line naming each stale CRD and (the first few of) the fields it lacks."""
    parts = []
    for name, fields in stale.items():
        named = ", ".join(fields[:NAMED])
        more = f" and {len(fields) - NAMED} more" if len(fields) > NAMED else ""
        parts.append(f"{name} lacks {named}{more}")
    return "; ".join(parts)
