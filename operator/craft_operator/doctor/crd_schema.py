"""Whether the installed CRDs declare every field this operator reads and writes.

An install that upgraded the operator without ``kubectl apply -k crds`` keeps an older
CRD: the API server serves it, but prunes every field it does not declare, from specs
(a setting the user wrote is lost without an error) and from the operator's status writes
(``status.admittedImages`` among them: a pod a mutating webhook changed is then replaced
after each operator restart). ``doctor`` compares the served schemas with the operator's.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from craft_operator.api.crd import build_crd
from craft_operator.api.pool_crd import build_pool_crd
from craft_operator.kube.client import ApiError, KubeClient, NotFoundError
from craft_operator.policy.crd import build_policy_crd

CRDS_PATH = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
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


def stale_fields(wanted: Mapping[str, Any], installed: Mapping[str, Any]) -> list[str]:
    """The fields of ``wanted``'s served version the installed CRD's version lacks (all of
    them, as ``<version>``, if it does not serve that version)."""
    version = wanted["spec"]["versions"][0]
    served = {v.get("name"): v for v in installed.get("spec", {}).get("versions") or []}
    theirs = served.get(version["name"])
    if theirs is None or not theirs.get("served", False):
        return [f"version {version['name']}"]
    return missing_fields(
        version["schema"]["openAPIV3Schema"],
        (theirs.get("schema") or {}).get("openAPIV3Schema") or {},
    )


async def stale_crds(kube: KubeClient) -> tuple[dict[str, list[str]], str | None]:
    """Each installed CRD of the operator's that lacks fields, with them; and why the CRDs
    could not be read (not allowed, say), if they could not. A CRD not installed is not
    listed: discovery says so first."""
    stale: dict[str, list[str]] = {}
    for build in BUILDERS:
        wanted = build()
        name = wanted["metadata"]["name"]
        try:
            installed = await kube.request("GET", f"{CRDS_PATH}/{name}")
        except NotFoundError:
            continue
        except ApiError as exc:
            return stale, f"{exc.status} {exc.reason}"
        lacking = stale_fields(wanted, installed)
        if lacking:
            stale[name] = lacking
    return stale, None


def describe_stale(stale: Mapping[str, list[str]]) -> str:
    """One line naming each stale CRD and (the first few of) the fields it lacks."""
    parts = []
    for name, fields in stale.items():
        named = ", ".join(fields[:NAMED])
        more = f" and {len(fields) - NAMED} more" if len(fields) > NAMED else ""
        parts.append(f"{name} lacks {named}{more}")
    return "; ".join(parts)
