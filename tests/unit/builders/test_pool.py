"""Specification of a pool's warm pod: a sandbox pod's container and security, the pool's
labels and owner, and nothing of any user (no credentials, no skill, no library volume)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from craft_operator.api.models import CraftSandbox
from craft_operator.api.pool import (
    LABEL_POOL,
    LABEL_POOL_TEMPLATE_HASH,
    CraftSandboxPool,
    parse_pool,
)
from craft_operator.builders import naming
from craft_operator.builders.pod import SandboxConfigError, build_pod, template_hash
from craft_operator.builders.pool import (
    CREDENTIALS_MOUNT,
    Form,
    _pod_spec,
    build_pool_pod,
    canonical_tolerations,
    claimable_pod_spec,
    claimed_template_hashes,
    differing_settings,
    pool_pod_spec,
    pool_template_hash,
    sandbox_template_hash,
)
from craft_operator.config import Settings
from tests.support.pss import restricted_violations
from tests.support.schemas import kubernetes_schema_problems
from tests.unit.builders.conftest import NAMESPACE

MakeSandbox = Callable[..., CraftSandbox]

pytestmark = pytest.mark.unit

EXAMPLE = Path(__file__).parents[3] / "manifests" / "examples" / "pools" / "warm-pool.yaml"
POOL_UID = "9a8b7c6d-0000-4000-8000-000000000001"


def make_pool(name: str = "standard", **spec: Any) -> CraftSandboxPool:
    """A parsed pool with ``spec`` (camelCase), as the API server hands it over."""
    body = {
        "apiVersion": "craft.onyx.app/v1alpha1",
        "kind": "CraftSandboxPool",
        "metadata": {"name": name, "namespace": NAMESPACE, "uid": POOL_UID, "generation": 1},
        "spec": {"replicas": 3, **spec},
    }
    return parse_pool(body)


def only_container(pod: dict[str, Any]) -> dict[str, Any]:
    [container] = pod["spec"]["containers"]
    assert isinstance(container, dict)
    return container


def test_the_pod_is_named_by_the_api_server_after_its_pool(settings: Settings) -> None:
    meta = build_pool_pod(make_pool(), settings)["metadata"]
    assert meta["generateName"] == "standard-"
    assert "name" not in meta
    assert meta["namespace"] == NAMESPACE


def test_the_pod_carries_the_pool_labels_and_no_user(settings: Settings) -> None:
    labels = build_pool_pod(make_pool(), settings)["metadata"]["labels"]
    assert labels == {
        "app.kubernetes.io/name": "craft-sandbox",
        "app.kubernetes.io/managed-by": "craft-operator",
        "app.kubernetes.io/component": "sandbox",
        LABEL_POOL: "standard",
        LABEL_POOL_TEMPLATE_HASH: pool_template_hash(make_pool().spec, settings),
    }


def test_the_pool_is_the_pods_controller(settings: Settings) -> None:
    [owner] = build_pool_pod(make_pool(), settings)["metadata"]["ownerReferences"]
    assert owner == {
        "apiVersion": "craft.onyx.app/v1alpha1",
        "kind": "CraftSandboxPool",
        "name": "standard",
        "uid": POOL_UID,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def test_the_container_is_a_sandbox_container_without_credentials(
    settings: Settings, make_sandbox: MakeSandbox
) -> None:
    spec = {"image": "registry.example.com/sandbox:2", "resources": {"limits": {"cpu": "3"}}}
    pool_container = only_container(build_pool_pod(make_pool(**spec), settings))
    sandbox_container = only_container(build_pod(make_sandbox(**spec), settings))
    for field in ("name", "image", "imagePullPolicy", "resources", "securityContext"):
        assert pool_container[field] == sandbox_container[field], field
    assert pool_container["env"] == [{"name": "ONYX_SERVER_URL", "value": settings.server_url}]
    assert "envFrom" not in pool_container


def test_nothing_of_a_user_is_mounted_only_empty_directories(settings: Settings) -> None:
    pod = build_pool_pod(make_pool(), settings)
    volumes = {volume["name"]: volume for volume in pod["spec"]["volumes"]}
    assert volumes == {
        "skills": {"name": "skills", "emptyDir": {}},
        "user-library": {"name": "user-library", "emptyDir": {}},
        "onyx-credentials": {
            "name": "onyx-credentials",
            "emptyDir": {"medium": "Memory", "sizeLimit": "1Mi"},
        },
    }
    mounts = {mount["name"]: mount["mountPath"] for mount in only_container(pod)["volumeMounts"]}
    assert mounts["onyx-credentials"] == CREDENTIALS_MOUNT == "/run/onyx"
    assert mounts["skills"] == "/workspace/skills/company-search"
    assert mounts["user-library"] == "/workspace/user_library"


def test_the_pod_is_valid_and_complies_with_restricted_pod_security(settings: Settings) -> None:
    pod = build_pool_pod(make_pool(**yaml.safe_load(EXAMPLE.read_text())["spec"]), settings)
    pod["metadata"]["name"] = "standard-abcde"  # as the API server names it
    assert kubernetes_schema_problems(pod) == []
    assert restricted_violations(pod) == []
    assert pod["spec"]["automountServiceAccountToken"] is False


def test_scheduling_passes_through_as_for_a_sandbox(
    settings: Settings, make_sandbox: MakeSandbox
) -> None:
    spec = {
        "runtimeClassName": "gvisor",
        "nodeSelector": {"pool": "sandboxes"},
        "tolerations": [{"key": "sandbox", "operator": "Exists", "effect": "NoSchedule"}],
        "priorityClassName": "craft-warm",
    }
    pool_spec = build_pool_pod(make_pool(**spec), settings)["spec"]
    sandbox_spec = build_pod(make_sandbox(**spec), settings)["spec"]
    for field in ("runtimeClassName", "nodeSelector", "tolerations", "priorityClassName"):
        assert pool_spec[field] == sandbox_spec[field], field


def test_a_sandbox_with_the_same_settings_matches_the_pool(
    settings: Settings, make_sandbox: MakeSandbox
) -> None:
    spec = {"image": "registry.example.com/sandbox:2", "runtimeClassName": "gvisor"}
    assert sandbox_template_hash(make_sandbox(**spec), settings) == pool_template_hash(
        make_pool(**spec).spec, settings
    )
    # What only a sandbox has (its user, sources, credentials) does not matter.
    other_user = make_sandbox(**spec, sources=[{"name": "slack"}], credentials={"lifetime": "1h"})
    assert sandbox_template_hash(other_user, settings) == pool_template_hash(
        make_pool(**spec).spec, settings
    )


def test_a_sandbox_that_writes_the_pools_quantities_differently_matches_it(
    settings: Settings, make_sandbox: MakeSandbox
) -> None:
    """The API server stores both the same: ``0.5`` is ``500m``, ``2048Mi`` is ``2Gi``."""
    pool = make_pool(resources={"requests": {"cpu": "500m", "memory": "2048Mi"}})
    sandbox = make_sandbox(resources={"requests": {"cpu": "0.5", "memory": "2Gi"}})
    assert sandbox_template_hash(sandbox, settings) == pool_template_hash(pool.spec, settings)


@pytest.mark.parametrize(
    ("in_the_pool", "in_the_sandbox"),
    [("4Gi", "4294967296"), ("512Mi", "536870912"), ("1.5Gi", "1610612736"), ("2G", "1953125Ki")],
)
def test_a_sandbox_that_writes_the_pools_memory_in_other_units_matches_it(
    settings: Settings, make_sandbox: MakeSandbox, in_the_pool: str, in_the_sandbox: str
) -> None:
    """A Python backend passing ``4 * 1024**3`` writes bytes: the same memory, the same
    pod (it started cold, the pool's pods said to differ "in resources")."""
    pool = make_pool(resources={"requests": {"memory": in_the_pool}})
    sandbox = make_sandbox(resources={"requests": {"memory": in_the_sandbox}})

    assert sandbox_template_hash(sandbox, settings) == pool_template_hash(pool.spec, settings)
    # A pool's pods made before carry the hash of the pool's spelling, which a claim takes.
    before = template_hash(_pod_spec(sandbox, settings, form=Form.QUANTITIES_AS_SPELLED))
    assert before in claimed_template_hashes(sandbox, settings)


def test_a_pod_claimed_before_quantities_were_hashed_canonically_is_still_the_sandboxs(
    settings: Settings, make_sandbox: MakeSandbox
) -> None:
    """Its label carries the hash of the quantities as written: an upgrade must not
    replace it (and lose the agent's work)."""
    sandbox = make_sandbox(resources={"requests": {"cpu": "0.5"}})
    as_written = template_hash(_pod_spec(sandbox, settings, form=Form.AS_WRITTEN))
    assert as_written != sandbox_template_hash(sandbox, settings)
    assert claimed_template_hashes(sandbox, settings) == {
        as_written,
        sandbox_template_hash(sandbox, settings),
    }


@pytest.mark.parametrize("form", list(Form)[1:], ids=lambda form: form.value)
def test_a_pod_claimed_under_any_older_operators_hash_is_still_the_sandboxs(
    settings: Settings, make_sandbox: MakeSandbox, form: Form
) -> None:
    """Each older operator labelled its pods with a hash of its own form of the settings:
    an upgrade must replace none of the pods they claimed (and lose the agent's work)."""
    sandbox = make_sandbox(
        resources={"requests": {"cpu": "0.5", "memory": "4294967296"}},
        tolerations=[{"key": "b", "operator": "Exists", "value": ""}, {"key": "a"}],
    )
    older = template_hash(_pod_spec(sandbox, settings, form=form))
    assert older != sandbox_template_hash(sandbox, settings)
    assert older in claimed_template_hashes(sandbox, settings)


#: A sandbox that differs from its pool's pods in one pod setting, for each setting.
ONE_SETTING_DIFFERENT = pytest.mark.parametrize(
    "difference",
    [
        {"image": "registry.example.com/sandbox:3"},
        {"resources": {"requests": {"memory": "3Gi"}}},
        {"runtimeClassName": "kata"},
        {"nodeSelector": {"zone": "b"}},
        {"tolerations": [{"key": "x", "operator": "Exists"}]},
        {"priorityClassName": "high"},
        {"serverURL": "https://elsewhere.example.com"},
    ],
    ids=lambda difference: next(iter(difference)),
)


@ONE_SETTING_DIFFERENT
def test_a_sandbox_that_differs_in_one_pod_setting_does_not_match(
    settings: Settings, make_sandbox: MakeSandbox, difference: dict[str, Any]
) -> None:
    pool_hash = pool_template_hash(make_pool().spec, settings)
    assert sandbox_template_hash(make_sandbox(), settings) == pool_hash
    assert sandbox_template_hash(make_sandbox(**difference), settings) != pool_hash


@ONE_SETTING_DIFFERENT
def test_the_one_pod_setting_a_sandbox_differs_in_is_the_one_named(
    settings: Settings, make_sandbox: MakeSandbox, difference: dict[str, Any]
) -> None:
    pools = pool_pod_spec(make_pool().spec, settings)
    mine = claimable_pod_spec(make_sandbox(**difference), settings)
    assert differing_settings(mine, pools) == list(difference)
    assert differing_settings(claimable_pod_spec(make_sandbox(), settings), pools) == []


def test_the_template_hash_follows_the_operator_defaults(settings: Settings) -> None:
    before = pool_template_hash(make_pool().spec, settings)
    newer = settings.model_copy(update={"sandbox_image": "craft-sandbox:9"})
    assert pool_template_hash(make_pool().spec, newer) != before
    assert pool_template_hash(make_pool(replicas=7).spec, settings) == before


def test_a_pool_without_a_server_url_anywhere_cannot_make_pods(tmp_path: Path) -> None:
    with pytest.raises(SandboxConfigError) as raised:
        build_pool_pod(make_pool(), Settings(state_dir=tmp_path))
    assert raised.value.reason == "NoServerURL"
    assert "CRAFT_SERVER_URL" in str(raised.value)
    assert "spec.serverURL" not in str(raised.value), "a pool has no such field"


def test_the_pod_labels_are_the_ones_the_sandbox_network_policy_selects(
    settings: Settings,
) -> None:
    policy = next(
        doc
        for doc in yaml.safe_load_all(
            (EXAMPLE.parents[2] / "sandbox-namespace" / "networkpolicy.yaml").read_text()
        )
        if doc and doc["kind"] == "NetworkPolicy" and "Egress" in doc["spec"]["policyTypes"]
    )
    labels = build_pool_pod(make_pool(), settings)["metadata"]["labels"]
    selector = policy["spec"]["podSelector"]["matchLabels"]
    assert all(labels.get(key) == value for key, value in selector.items())
    assert naming.LABEL_USER_ID not in labels
    assert naming.LABEL_SANDBOX not in labels


def test_tolerations_that_mean_the_same_are_one_canonical_list() -> None:
    """Order, repeats and the default operator spelled out or not make no other pod."""
    gvisor = {"key": "gvisor", "operator": "Exists", "effect": "NoSchedule"}
    dedicated = {"key": "dedicated", "value": "craft", "effect": "NoSchedule"}
    spelled = {**dedicated, "operator": "Equal"}

    assert canonical_tolerations([gvisor, dedicated]) == canonical_tolerations(
        [spelled, gvisor, spelled]
    )
    assert canonical_tolerations([{"operator": "Exists"}]) == [{"operator": "Exists"}]


@pytest.mark.parametrize(
    ("in_the_pool", "in_the_sandbox"),
    [
        ({"operator": "Exists"}, {"key": "", "operator": "Exists"}),
        (
            {"key": "gvisor", "operator": "Exists"},
            {"key": "gvisor", "operator": "Exists", "value": ""},
        ),
        ({"key": "dedicated", "operator": "Equal"}, {"key": "dedicated", "value": ""}),
    ],
    ids=["empty-key", "exists-empty-value", "equal-empty-value"],
)
def test_empty_toleration_fields_mean_none_and_want_the_same_pod(
    settings: Settings,
    make_sandbox: MakeSandbox,
    in_the_pool: dict[str, str],
    in_the_sandbox: dict[str, str],
) -> None:
    """The API server drops them as it stores the pod: they never made another one."""
    pool = make_pool(tolerations=[in_the_pool])
    sandbox = make_sandbox(tolerations=[in_the_sandbox])

    assert sandbox_template_hash(sandbox, settings) == pool_template_hash(pool.spec, settings)
    before = template_hash(_pod_spec(sandbox, settings, form=Form.TOLERATIONS_WITH_EMPTY_FIELDS))
    assert before in claimed_template_hashes(sandbox, settings)  # a pool's pods made before


def test_a_pool_and_a_sandbox_that_list_the_same_tolerations_otherwise_want_the_same_pod(
    settings: Settings, make_sandbox: MakeSandbox
) -> None:
    gvisor = {"key": "gvisor", "operator": "Exists", "effect": "NoSchedule"}
    dedicated = {"key": "dedicated", "value": "craft", "effect": "NoSchedule"}
    pool = make_pool(tolerations=[{**dedicated, "operator": "Equal"}, gvisor])
    sandbox = make_sandbox(tolerations=[gvisor, dedicated])

    assert sandbox_template_hash(sandbox, settings) == pool_template_hash(pool.spec, settings)
    older = template_hash(_pod_spec(sandbox, settings, form=Form.TOLERATIONS_AS_WRITTEN))
    assert older in claimed_template_hashes(sandbox, settings)  # claimed before: kept
