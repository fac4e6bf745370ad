"""Specification of child convergence: what counts as drift, whose object it is, and the
create/adopt/patch/leave-alone decisions against the emulator (counting its requests)."""

from __future__ import annotations

import base64
import copy
from typing import Any

import pytest
from pydantic import SecretStr

from craft_operator.api.models import CraftSandbox
from craft_operator.api.parse import parse_sandbox
from craft_operator.builders.configmap import build_skills_configmap
from craft_operator.builders.naming import owner_reference
from craft_operator.builders.secret import build_credentials_secret
from craft_operator.kube.cache import ObjectCache
from craft_operator.kube.client import CONFIGMAPS, SECRETS, KubeClient, NotFoundError
from craft_operator.reconciler.children import (
    ForeignObjectError,
    controlled_by,
    converge,
    drift_patch,
    is_ours,
)
from tests.support.emulator import KubeEmulator
from tests.unit.reconciler.conftest import NAMESPACE

UID = "11111111-2222-4333-8444-555555555555"
OTHER_UID = "99999999-2222-4333-8444-555555555555"


def make_sandbox(uid: str = UID, name: str = "alice") -> CraftSandbox:
    """A parsed CraftSandbox as the API hands it over."""
    return parse_sandbox(
        {
            "apiVersion": "craft.onyx.app/v1alpha1",
            "kind": "CraftSandbox",
            "metadata": {"name": name, "namespace": NAMESPACE, "uid": uid, "generation": 1},
            "spec": {"user": {"id": "3f2b8c1e-9d4a-4e6b-8f0a-1c2d3e4f5a6b"}},
        }
    )


def desired_configmap(text: str = "# skill\n", uid: str = UID) -> dict[str, Any]:
    """The skills ConfigMap the operator wants."""
    return build_skills_configmap(make_sandbox(uid), text=text, content_hash="h-" + str(len(text)))


def desired_secret(token: str = "onyx_pat_abc", pat_id: int = 1) -> dict[str, Any]:
    """The credentials Secret the operator wants."""
    return build_credentials_secret(make_sandbox(), token=SecretStr(token), pat_id=pat_id)


def writes(emulator: KubeEmulator, since: int) -> list[str]:
    """The write requests served after ``since`` requests."""
    return emulator.writes(since)


# -- drift_patch ---------------------------------------------------------------------------


def test_an_object_as_desired_needs_no_patch() -> None:
    desired = desired_configmap()
    actual = copy.deepcopy(desired)
    actual["metadata"].update(uid="u", resourceVersion="5", creationTimestamp="t")
    assert drift_patch(actual, desired) == {}


def test_edited_data_is_put_back_and_extra_keys_are_removed_with_null() -> None:
    desired = desired_configmap("right\n")
    actual = copy.deepcopy(desired)
    actual["data"] = {"SKILL.md": "edited\n", "extra.txt": "smuggled"}
    assert drift_patch(actual, desired) == {"data": {"SKILL.md": "right\n", "extra.txt": None}}


def test_missing_data_is_restored_whole() -> None:
    desired = desired_secret()
    actual = copy.deepcopy(desired)
    del actual["data"]
    assert drift_patch(actual, desired) == {"data": desired["data"]}


def test_a_changed_secret_type_is_put_back() -> None:
    desired = desired_secret()
    actual = {**copy.deepcopy(desired), "type": "kubernetes.io/basic-auth"}
    assert drift_patch(actual, desired) == {"type": "Opaque"}


def test_our_labels_and_annotations_are_restored_and_others_are_kept() -> None:
    desired = desired_configmap()
    actual = copy.deepcopy(desired)
    actual["metadata"]["labels"]["craft.onyx.app/sandbox"] = "mallory"
    del actual["metadata"]["labels"]["onyx.app/tenant-id"]
    actual["metadata"]["labels"]["team"] = "research"
    actual["metadata"]["annotations"]["craft.onyx.app/skill-hash"] = "tampered"
    actual["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied"] = "{}"
    patch = drift_patch(actual, desired)
    assert patch == {
        "metadata": {
            "labels": {"craft.onyx.app/sandbox": "alice", "onyx.app/tenant-id": "public"},
            "annotations": {
                "craft.onyx.app/skill-hash": desired["metadata"]["annotations"][
                    "craft.onyx.app/skill-hash"
                ]
            },
        }
    }


def test_missing_labels_and_annotations_maps_are_restored() -> None:
    desired = desired_configmap()
    actual = copy.deepcopy(desired)
    del actual["metadata"]["labels"]
    del actual["metadata"]["annotations"]
    patch = drift_patch(actual, desired)
    assert patch["metadata"]["labels"] == desired["metadata"]["labels"]
    assert patch["metadata"]["annotations"] == desired["metadata"]["annotations"]


def test_a_missing_owner_reference_is_appended_to_the_others() -> None:
    desired = desired_configmap()
    actual = copy.deepcopy(desired)
    someone = {"apiVersion": "v1", "kind": "ConfigMap", "name": "x", "uid": "x-uid"}
    actual["metadata"]["ownerReferences"] = [someone]
    assert drift_patch(actual, desired) == {
        "metadata": {"ownerReferences": [someone, owner_reference(make_sandbox())]}
    }


def test_drift_patch_does_not_modify_its_inputs() -> None:
    desired = desired_configmap()
    actual = copy.deepcopy(desired)
    actual["data"] = {"other": "x"}
    actual["metadata"]["ownerReferences"] = []
    before = (copy.deepcopy(actual), copy.deepcopy(desired))
    drift_patch(actual, desired)
    assert (actual, desired) == before


# -- is_ours -------------------------------------------------------------------------------


def test_an_object_controlled_by_this_sandbox_is_ours() -> None:
    assert is_ours(desired_configmap(), desired_configmap())


def test_an_object_controlled_by_another_owner_is_not_ours_despite_our_labels() -> None:
    actual = desired_configmap(uid=OTHER_UID)
    assert not is_ours(actual, desired_configmap())


def test_our_labels_without_an_owner_reference_do_not_make_it_ours() -> None:
    """Anyone who can create a ConfigMap can copy labels; only the owner reference counts."""
    actual = desired_configmap()
    actual["metadata"]["ownerReferences"] = []
    assert not is_ours(actual, desired_configmap())


def test_a_non_controller_owner_reference_to_this_sandbox_does_not_make_it_ours() -> None:
    """Anyone who can create a Secret can name the sandbox as a plain owner; only the
    controller reference, which the operator sets, counts."""
    actual = desired_configmap()
    actual["metadata"]["ownerReferences"] = [
        {**owner_reference(make_sandbox()), "controller": False}
    ]
    assert not is_ours(actual, desired_configmap())


def test_another_controller_makes_it_not_ours_even_with_our_owner_reference() -> None:
    actual = desired_configmap()
    actual["metadata"]["ownerReferences"] = [
        {**owner_reference(make_sandbox()), "controller": False},
        {**owner_reference(make_sandbox(uid=OTHER_UID)), "controller": True},
    ]
    assert not is_ours(actual, desired_configmap())


@pytest.mark.parametrize(
    "labels",
    [
        {},
        {"app.kubernetes.io/managed-by": "helm", "craft.onyx.app/sandbox": "alice"},
        {"app.kubernetes.io/managed-by": "craft-operator", "craft.onyx.app/sandbox": "alice"},
        {"app.kubernetes.io/managed-by": "craft-operator"},
    ],
)
def test_without_an_owner_reference_it_is_not_ours_whatever_its_labels(
    labels: dict[str, str],
) -> None:
    actual = {"metadata": {"name": "alice-skills", "labels": labels}}
    assert not is_ours(actual, desired_configmap())


def test_only_a_controller_reference_to_that_uid_controls_an_object() -> None:
    """The one test of ownership the finalizer, the policy's withdrawal, the Job's result
    and child convergence all use."""
    controlled = desired_configmap()
    plain = desired_configmap()
    plain["metadata"]["ownerReferences"] = [
        {**owner_reference(make_sandbox()), "controller": False}
    ]
    assert controlled_by(controlled, UID)
    assert not controlled_by(controlled, OTHER_UID)
    assert not controlled_by(plain, UID)
    assert not controlled_by(controlled, "")  # an owner without a uid controls nothing
    assert not controlled_by({"metadata": {}}, UID)


# -- converge against the emulator ---------------------------------------------------------


async def test_a_missing_child_is_created_and_cached(
    kube: KubeClient, emulator: KubeEmulator
) -> None:
    cache = ObjectCache()
    result = await converge(kube, cache, CONFIGMAPS, "ConfigMap", desired_configmap())
    assert result.action == "created"
    stored = emulator.get("v1/configmaps", NAMESPACE, "alice-skills")
    assert stored["data"] == {"SKILL.md": "# skill\n"}
    assert cache.get("ConfigMap", NAMESPACE, "alice-skills") == result.obj == stored


async def test_an_unchanged_child_costs_no_request_at_all(
    kube: KubeClient, emulator: KubeEmulator
) -> None:
    cache = ObjectCache()
    await converge(kube, cache, SECRETS, "Secret", desired_secret())
    served = len(emulator.served)
    result = await converge(kube, cache, SECRETS, "Secret", desired_secret())
    assert result.action == "unchanged"
    assert len(emulator.served) == served


async def test_an_edited_child_is_patched_back_in_one_write(
    kube: KubeClient, emulator: KubeEmulator
) -> None:
    cache = ObjectCache()
    await converge(kube, cache, SECRETS, "Secret", desired_secret())
    edited = emulator.patch(
        "v1/secrets",
        NAMESPACE,
        "alice-credentials",
        {
            "data": {"ONYX_PAT": base64.b64encode(b"stolen").decode(), "x": "eA=="},
            "metadata": {"labels": {"team": "kept"}},
        },
    )
    cache.put("Secret", edited)  # as the watch would deliver it
    served = len(emulator.served)
    result = await converge(kube, cache, SECRETS, "Secret", desired_secret())
    assert result.action == "updated"
    assert result.fields == ("data",)
    assert writes(emulator, served) == [
        f"PATCH /api/v1/namespaces/{NAMESPACE}/secrets/alice-credentials"
    ]
    stored = emulator.get("v1/secrets", NAMESPACE, "alice-credentials")
    assert stored["data"] == desired_secret()["data"]
    assert stored["metadata"]["labels"]["team"] == "kept"
    assert cache.get("Secret", NAMESPACE, "alice-credentials") == stored


async def test_a_new_desired_state_is_patched_in(kube: KubeClient, emulator: KubeEmulator) -> None:
    cache = ObjectCache()
    await converge(kube, cache, CONFIGMAPS, "ConfigMap", desired_configmap("one\n"))
    result = await converge(kube, cache, CONFIGMAPS, "ConfigMap", desired_configmap("three\n"))
    assert result.action == "updated"
    assert result.fields == ("data", "metadata")  # the text and its hash annotation
    stored = emulator.get("v1/configmaps", NAMESPACE, "alice-skills")
    assert stored["data"] == {"SKILL.md": "three\n"}


async def test_an_existing_child_the_cache_has_not_seen_is_adopted_after_a_conflict(
    kube: KubeClient, emulator: KubeEmulator
) -> None:
    """E.g. the operator restarted right after writing it: 409, then read it and go on."""
    emulator.create("v1/configmaps", desired_configmap())
    cache = ObjectCache()
    served = len(emulator.served)
    result = await converge(kube, cache, CONFIGMAPS, "ConfigMap", desired_configmap())
    assert result.action == "unchanged"
    methods = [request.method.value.upper() for request in emulator.served[served:]]
    assert methods == ["POST", "GET"]
    assert cache.get("ConfigMap", NAMESPACE, "alice-skills") is not None


async def test_a_labelled_object_without_our_owner_reference_is_not_adopted(
    kube: KubeClient, emulator: KubeEmulator
) -> None:
    """Someone copied our labels onto their own ConfigMap: it is reported, never rewritten,
    and never cached as ours."""
    impostor = desired_configmap("theirs\n")
    impostor["metadata"]["ownerReferences"] = []
    emulator.create("v1/configmaps", impostor)
    cache = ObjectCache()
    served = len(emulator.served)
    with pytest.raises(ForeignObjectError):
        await converge(kube, cache, CONFIGMAPS, "ConfigMap", desired_configmap())
    assert writes(emulator, served) == [f"POST /api/v1/namespaces/{NAMESPACE}/configmaps"]
    assert emulator.get("v1/configmaps", NAMESPACE, "alice-skills")["data"] == {
        "SKILL.md": "theirs\n"
    }
    assert cache.get("ConfigMap", NAMESPACE, "alice-skills") is None


async def test_a_foreign_object_with_the_childs_name_is_left_alone(
    kube: KubeClient, emulator: KubeEmulator
) -> None:
    emulator.create(
        "v1/configmaps",
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "alice-skills", "namespace": NAMESPACE},
            "data": {"mine": "yes"},
        },
    )
    served = len(emulator.served)
    with pytest.raises(ForeignObjectError) as caught:
        await converge(kube, ObjectCache(), CONFIGMAPS, "ConfigMap", desired_configmap())
    assert f"ConfigMap {NAMESPACE}/alice-skills" in str(caught.value)
    assert caught.value.name == "alice-skills"
    assert writes(emulator, served) == [f"POST /api/v1/namespaces/{NAMESPACE}/configmaps"]
    assert emulator.get("v1/configmaps", NAMESPACE, "alice-skills")["data"] == {"mine": "yes"}


async def test_a_child_of_an_earlier_sandbox_of_the_same_name_is_foreign(
    kube: KubeClient, emulator: KubeEmulator
) -> None:
    emulator.create("v1/configmaps", desired_configmap(uid=OTHER_UID))
    with pytest.raises(ForeignObjectError):
        await converge(kube, ObjectCache(), CONFIGMAPS, "ConfigMap", desired_configmap())


async def test_a_child_of_an_earlier_sandbox_still_being_deleted_frees_its_name_by_itself(
    kube: KubeClient, emulator: KubeEmulator
) -> None:
    earlier = {**desired_configmap(uid=OTHER_UID)}
    earlier["metadata"] = {**earlier["metadata"], "finalizers": ["example.com/hold"]}
    emulator.create("v1/configmaps", earlier)
    emulator.remove("v1/configmaps", NAMESPACE, "alice-skills")
    with pytest.raises(ForeignObjectError) as caught:
        await converge(kube, ObjectCache(), CONFIGMAPS, "ConfigMap", desired_configmap())
    assert caught.value.leaving
    assert caught.value.reason("ConfigMap") == "ConfigMapTerminating"
    assert "still being deleted" in str(caught.value)
    deleted = emulator.get("v1/configmaps", NAMESPACE, "alice-skills")["metadata"]
    assert f"(since {deleted['deletionTimestamp']}; held by finalizers example.com/hold)" in str(
        caught.value
    ), "whoever finds it stuck learns since when and what holds it"
    assert emulator.get("v1/configmaps", NAMESPACE, "alice-skills")["data"] == earlier["data"]


def test_an_object_held_by_many_long_finalizers_names_a_few_of_them_shortened() -> None:
    found = {
        "metadata": {
            "namespace": NAMESPACE,
            "name": "alice-skills",
            "deletionTimestamp": "2026-11-29T17:00:00Z",
            "finalizers": [f"example.com/{index}-" + "x" * 300 for index in range(30)],
        }
    }
    message = str(ForeignObjectError.of("ConfigMap", found))
    assert "since 2026-11-29T17:00:00Z; held by finalizers example.com/0-xx" in message
    assert "example.com/3-" in message
    assert "example.com/4-" not in message
    assert "and 26 more" in message
    assert len(message) < 600, "a status message, not a dump of the object"


def test_an_object_being_deleted_without_finalizers_says_since_when_only() -> None:
    found = {"metadata": {"name": "alice-skills", "deletionTimestamp": "2026-11-29T17:00:00Z"}}
    message = str(ForeignObjectError.of("Secret", found))
    assert "is still being deleted (since 2026-11-29T17:00:00Z): retried" in message


async def test_a_child_of_someone_else_asks_for_a_change(
    kube: KubeClient, emulator: KubeEmulator
) -> None:
    emulator.create("v1/configmaps", desired_configmap(uid=OTHER_UID))
    with pytest.raises(ForeignObjectError) as caught:
        await converge(kube, ObjectCache(), CONFIGMAPS, "ConfigMap", desired_configmap())
    assert not caught.value.leaving
    assert caught.value.reason("ConfigMap") == "ConfigMapNameTaken"


async def test_a_cached_child_deleted_behind_our_back_surfaces_as_not_found(
    kube: KubeClient, emulator: KubeEmulator
) -> None:
    cache = ObjectCache()
    await converge(kube, cache, CONFIGMAPS, "ConfigMap", desired_configmap("one\n"))
    emulator.remove("v1/configmaps", NAMESPACE, "alice-skills")
    with pytest.raises(NotFoundError):
        await converge(kube, cache, CONFIGMAPS, "ConfigMap", desired_configmap("two\n"))


async def test_a_child_replaced_since_the_cache_saw_it_is_judged_again_before_any_patch(
    kube: KubeClient, emulator: KubeEmulator
) -> None:
    """The cache still holds our ConfigMap; the live one of that name is now a recreated
    sandbox's (another uid): the patch meant for ours must not land on it."""
    cache = ObjectCache()
    await converge(kube, cache, CONFIGMAPS, "ConfigMap", desired_configmap("one\n"))
    emulator.remove("v1/configmaps", NAMESPACE, "alice-skills")
    emulator.create("v1/configmaps", desired_configmap("theirs\n", uid=OTHER_UID))

    with pytest.raises(ForeignObjectError):
        await converge(kube, cache, CONFIGMAPS, "ConfigMap", desired_configmap("two\n"))

    stored = emulator.get("v1/configmaps", NAMESPACE, "alice-skills")
    assert stored["data"] == {"SKILL.md": "theirs\n"}
    assert [ref["uid"] for ref in stored["metadata"]["ownerReferences"]] == [OTHER_UID]


async def test_a_child_changed_since_the_cache_saw_it_is_patched_as_it_is_now(
    kube: KubeClient, emulator: KubeEmulator
) -> None:
    cache = ObjectCache()
    await converge(kube, cache, CONFIGMAPS, "ConfigMap", desired_configmap("one\n"))
    emulator.patch(
        "v1/configmaps", NAMESPACE, "alice-skills", {"metadata": {"labels": {"team": "a"}}}
    )  # not yet seen by the cache

    result = await converge(kube, cache, CONFIGMAPS, "ConfigMap", desired_configmap("two\n"))

    assert result.action == "updated"
    stored = emulator.get("v1/configmaps", NAMESPACE, "alice-skills")
    assert stored["data"] == {"SKILL.md": "two\n"}
    assert stored["metadata"]["labels"]["team"] == "a"
    assert cache.get("ConfigMap", NAMESPACE, "alice-skills") == stored
