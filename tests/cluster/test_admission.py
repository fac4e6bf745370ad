"""The CraftSandbox CRD on a real API server: what it admits, what it refuses, and in what words.

The offline tests (``tests/unit/api``) judge the same manifests with an emulation of the API
server's admission (``tests/support/crd_validation.py``); here the real kube-apiserver does,
with the committed CRD installed. Every example is created; every invalid case of
``tests/unit/api/cases.py`` is refused with its status and message, and the offline emulator
reports exactly what the real server reports. Requests use strict field validation, as
kubectl sends them; refusals and updates are server-side dry runs (``dryRun=All``: judged
exactly as a real write, never stored), so one namespace serves the refusals and one stored
object of another serves many updates.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from craft_operator.api.spec import DISABLED_PATHS_BUDGET, SCOPES_BUDGET
from tests.support.cluster import CRAFT, ApiError, Cluster, path_of
from tests.support.crd_validation import NOT_CHECKED, craftsandbox_validator
from tests.unit.api.cases import (
    ALLOWED_CHANGES,
    INVALID,
    RENAMED,
    TENANT_IMMUTABLE,
    USER_ID_IMMUTABLE,
    Case,
)
from tests.unit.api.samples import EXAMPLES_DIR, OTHER_USER_ID, USER_ID, load_yaml, sandbox

SANDBOXES = f"{CRAFT}/craftsandboxes"
EXAMPLES = sorted(EXAMPLES_DIR.glob("*.yaml"))
#: kubectl's default: an unknown field refuses the request instead of being dropped.
STRICT = "fieldValidation=Strict"
DRY_RUN = "dryRun=All"


@pytest.fixture(scope="module")
def dry_runs(cluster: Cluster) -> str:
    """An empty sandbox namespace for this module's dry-run creates (they store nothing)."""
    return cluster.sandbox_namespace("admission-dry-runs")


@pytest.fixture(scope="module")
def updates(cluster: Cluster) -> str:
    """A sandbox namespace for the objects this module updates in dry runs."""
    return cluster.sandbox_namespace("admission-updates")


@pytest.fixture(scope="module")
def acme(cluster: Cluster, updates: str) -> dict[str, Any]:
    """A stored CraftSandbox of tenant acme with every field set."""
    stored = sandbox(load_yaml(EXAMPLES_DIR / "full.yaml")["spec"], name="acme")
    stored["spec"]["user"] = {"id": USER_ID, "tenantId": "acme"}
    return create(cluster, updates, stored)


@pytest.fixture(scope="module")
def minimal(cluster: Cluster, updates: str) -> dict[str, Any]:
    """A stored CraftSandbox with only user.id (so tenantId was defaulted to public)."""
    return create(cluster, updates, sandbox(name="alice"))


def placed(manifest: dict[str, Any], namespace: str) -> dict[str, Any]:
    """``manifest`` in ``namespace`` (whatever metadata.namespace it carries)."""
    copied = copy.deepcopy(manifest)
    copied.setdefault("metadata", {})["namespace"] = namespace
    return copied


def create(
    cluster: Cluster, namespace: str, manifest: dict[str, Any], *, dry_run: bool = False
) -> dict[str, Any]:
    """POST ``manifest`` into ``namespace``; the object as the server stores it."""
    query = f"?{STRICT}&{DRY_RUN}" if dry_run else f"?{STRICT}"
    return cluster.call("POST", path_of(SANDBOXES, namespace) + query, placed(manifest, namespace))


def update(cluster: Cluster, stored: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """A dry-run PUT of ``new`` to the URL of ``stored``; the object the server would store."""
    namespace, name = stored["metadata"]["namespace"], stored["metadata"]["name"]
    body = placed(new, namespace)
    body["metadata"]["resourceVersion"] = stored["metadata"]["resourceVersion"]
    url = path_of(SANDBOXES, namespace, name)
    return cluster.call("PUT", f"{url}?{STRICT}&{DRY_RUN}", body)


def refusal(request: Callable[[], object]) -> ApiError:
    """The server's refusal of ``request`` (fails the test if the server admits it)."""
    with pytest.raises(ApiError) as refused:
        request()
    return refused.value


def errors_of(error: ApiError) -> list[str]:
    """The errors as kubectl prints them: each field error (``path: detail``), in the
    server's order, or the message of a request refused before validation (400)."""
    causes = (error.body.get("details") or {}).get("causes")
    if not causes:
        return [error.message]
    return [f"{cause['field']}: {cause['message']}" for cause in causes]


def changed(old: dict[str, Any], **spec: Any) -> dict[str, Any]:
    """The manifest of ``old`` (as the server stored it) with top-level spec fields replaced."""
    new = {key: copy.deepcopy(old[key]) for key in ("apiVersion", "kind", "spec")}
    new["metadata"] = {"name": old["metadata"]["name"]}
    new["spec"].update(spec)
    return new


# --- the examples ----------------------------------------------------------------------------


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda path: path.name)
def test_the_example_is_created_with_the_defaults_the_offline_emulator_predicts(
    cluster: Cluster, namespace: str, path: Path
) -> None:
    manifest = load_yaml(path)
    predicted = craftsandbox_validator().admit_create(manifest)
    assert predicted.accepted, predicted.messages

    created = create(cluster, namespace, manifest)

    assert created["metadata"]["namespace"] == namespace
    assert created["metadata"]["name"] == manifest["metadata"]["name"]
    assert created["spec"] == predicted.object["spec"]
    assert cluster.sandbox(namespace, manifest["metadata"]["name"]) is not None


# --- the invalid cases -----------------------------------------------------------------------


@pytest.mark.parametrize("case", INVALID, ids=lambda case: case.id)
def test_the_mistake_is_refused_with_its_message(
    cluster: Cluster, dry_runs: str, case: Case
) -> None:
    error = refusal(lambda: create(cluster, dry_runs, case.manifest(), dry_run=True))

    assert error.status == case.status, error
    assert case.expect in error.message
    for fragment in case.also:
        assert fragment in error.message
    expected = (case.expect, *case.also, NOT_CHECKED)
    unexpected = [line for line in errors_of(error) if not any(p in line for p in expected)]
    assert unexpected == []


@pytest.mark.parametrize("case", INVALID, ids=lambda case: case.id)
def test_the_offline_emulator_reports_exactly_what_the_real_server_reports(
    cluster: Cluster, dry_runs: str, case: Case
) -> None:
    error = refusal(lambda: create(cluster, dry_runs, case.manifest(), dry_run=True))

    offline = craftsandbox_validator().admit_create(case.manifest())
    assert (offline.status, offline.messages) == (error.status, errors_of(error))


def test_the_largest_spec_the_schema_admits_fits_in_etcd(cluster: Cluster, updates: str) -> None:
    """Every list a user's actions grow at its limit, in three-byte characters, beside the
    most annotations the API server allows: stored, not refused by etcd (a 500 naming no
    field, as the schema's limits alone allowed: 2 MB of scopes and disabled paths)."""
    wide = "漢"  # three bytes in UTF-8, as a CJK file name's characters are
    per_source = SCOPES_BUDGET // 100
    scopes = [wide * 200] * (per_source // 200) + [wide * (per_source % 200)]
    sources = [
        {"name": f"s{'x' * 60}{i:03}", "description": wide * 500, "scopes": scopes}
        for i in range(100)
    ]
    paths = [wide * 1024] * (DISABLED_PATHS_BUDGET // 1024)
    library = {"disabledPaths": paths, "exclude": [wide * 256] * 100}
    manifest = sandbox({"user": {"id": USER_ID}, "sources": sources, "userLibrary": library})
    manifest["metadata"]["name"] = "largest"
    manifest["metadata"]["annotations"] = {"note": "n" * (256 * 1024 - 4)}

    stored = create(cluster, updates, manifest)

    assert stored["spec"]["userLibrary"]["disabledPaths"] == library["disabledPaths"]


def test_a_dry_run_is_judged_like_a_create_and_stores_nothing(
    cluster: Cluster, dry_runs: str
) -> None:
    admitted = create(cluster, dry_runs, sandbox(name="ghost"), dry_run=True)
    assert admitted["spec"]["user"]["tenantId"] == "public"
    assert cluster.list(SANDBOXES, dry_runs) == []


# --- updates: whose sandbox it is never changes ------------------------------------------------


def refused_update(cluster: Cluster, stored: dict[str, Any], new: dict[str, Any]) -> ApiError:
    """The refusal of updating ``stored`` to ``new``, checked against the offline emulator."""
    error = refusal(lambda: update(cluster, stored, new))
    offline = craftsandbox_validator().admit_update(changed(stored), new)
    assert (offline.status, offline.messages) == (error.status, errors_of(error))
    return error


def test_changing_the_user_id_is_refused(cluster: Cluster, acme: dict[str, Any]) -> None:
    new = changed(acme, user={"id": OTHER_USER_ID, "tenantId": "acme"})
    error = refused_update(cluster, acme, new)
    assert (error.status, errors_of(error)) == (422, [USER_ID_IMMUTABLE])


def test_changing_the_tenant_is_refused(cluster: Cluster, acme: dict[str, Any]) -> None:
    new = changed(acme, user={"id": USER_ID, "tenantId": "globex"})
    error = refused_update(cluster, acme, new)
    assert (error.status, errors_of(error)) == (422, [TENANT_IMMUTABLE])


def test_changing_user_and_tenant_reports_both(cluster: Cluster, acme: dict[str, Any]) -> None:
    new = changed(acme, user={"id": OTHER_USER_ID, "tenantId": "globex"})
    error = refused_update(cluster, acme, new)
    assert errors_of(error) == [USER_ID_IMMUTABLE, TENANT_IMMUTABLE]


def test_recasing_the_user_id_is_a_change(cluster: Cluster, acme: dict[str, Any]) -> None:
    new = changed(acme, user={"id": USER_ID.upper(), "tenantId": "acme"})
    assert errors_of(refused_update(cluster, acme, new)) == [USER_ID_IMMUTABLE]


def test_a_defaulted_tenant_may_be_left_out_or_spelt_out(
    cluster: Cluster, minimal: dict[str, Any]
) -> None:
    assert minimal["spec"]["user"] == {"id": USER_ID, "tenantId": "public"}
    left_out = update(cluster, minimal, changed(minimal, user={"id": USER_ID}, suspend=True))
    spelt_out = update(
        cluster, minimal, changed(minimal, user={"id": USER_ID, "tenantId": "public"})
    )
    assert left_out["spec"]["user"] == spelt_out["spec"]["user"] == minimal["spec"]["user"]
    assert left_out["spec"]["suspend"] is True


def test_a_defaulted_tenant_cannot_be_replaced(cluster: Cluster, minimal: dict[str, Any]) -> None:
    new = changed(minimal, user={"id": USER_ID, "tenantId": "acme"})
    assert errors_of(refused_update(cluster, minimal, new)) == [TENANT_IMMUTABLE]


@pytest.mark.parametrize(
    "change",
    [{"user": {"id": USER_ID, "tenantId": "acme", "email": "new@example.com"}}, *ALLOWED_CHANGES],
    ids=lambda change: "email" if "user" in change else next(iter(change)),
)
def test_changing_any_other_field_is_admitted(
    cluster: Cluster, acme: dict[str, Any], change: dict[str, Any]
) -> None:
    new = changed(acme, **change)
    assert craftsandbox_validator().admit_update(changed(acme), new).accepted

    updated = update(cluster, acme, new)

    assert {key: updated["spec"][key] for key in change} == change


def test_an_update_must_still_satisfy_the_other_rules(
    cluster: Cluster, minimal: dict[str, Any]
) -> None:
    error = refused_update(cluster, minimal, changed(minimal, idleTimeout="10s"))
    assert errors_of(error) == [
        'spec.idleTimeout: Invalid value: "10s": idleTimeout must be at least 1m'
    ]


def test_the_object_cannot_be_renamed(cluster: Cluster, minimal: dict[str, Any]) -> None:
    new = changed(minimal)
    new["metadata"]["name"] = "bob"
    error = refused_update(cluster, minimal, new)
    assert (error.status, error.message) == (400, RENAMED)


def test_status_sent_to_the_main_resource_is_ignored(cluster: Cluster, namespace: str) -> None:
    stored = create(cluster, namespace, sandbox())
    path = path_of(SANDBOXES, namespace, "alice")
    stored = cluster.call("PUT", f"{path}/status", {**stored, "status": {"phase": "Ready"}})
    new = {**changed(stored, suspend=True), "status": {"phase": "NotAPhase"}}

    updated = update(cluster, stored, new)

    assert updated["spec"]["suspend"] is True
    assert updated["status"] == {"phase": "Ready"}
