"""Specification of the sandbox pod: server URL, resources, volumes, scheduling passthrough,
the template hash and the restricted security settings."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from craft_operator.api.models import CraftSandbox, LibraryMode, Resources
from craft_operator.api.parse import parse_sandbox
from craft_operator.builders import naming
from craft_operator.builders.pod import (
    LIBRARY_MOUNT,
    SKILLS_MOUNT,
    SandboxConfigError,
    build_pod,
    library_volume,
    resources_for,
    server_url_for,
    template_hash,
)
from craft_operator.config import Settings
from tests.support.pss import restricted_violations
from tests.support.schemas import kubernetes_schema_problems
from tests.unit.builders.conftest import example_bodies

MakeSandbox = Callable[..., CraftSandbox]


def unchecked(make_sandbox: MakeSandbox, resources: dict[str, Any]) -> CraftSandbox:
    """A sandbox with ``resources`` as they are: the CRD and the model refuse a request
    that is not what its limit allows, but the builder does not count on either."""
    sandbox = make_sandbox()
    spec = sandbox.spec.model_copy(update={"resources": Resources.model_construct(**resources)})
    return sandbox.model_copy(update={"spec": spec})


def container(pod: dict[str, Any]) -> dict[str, Any]:
    """The sandbox container (the pod's only one)."""
    [only] = pod["spec"]["containers"]
    assert isinstance(only, dict)
    return only


def env(pod: dict[str, Any]) -> dict[str, Any]:
    """The container's env entries by name."""
    return {item["name"]: item for item in container(pod)["env"]}


# -- server URL ----------------------------------------------------------------------------


def test_the_spec_server_url_wins_over_the_settings(
    make_sandbox: MakeSandbox, settings: Settings
) -> None:
    sandbox = make_sandbox(serverURL="https://onyx.example.com")
    assert server_url_for(sandbox, settings) == "https://onyx.example.com"


def test_the_settings_server_url_is_the_default(
    make_sandbox: MakeSandbox, settings: Settings
) -> None:
    assert server_url_for(make_sandbox(), settings) == "http://onyx.invalid:8080"


def test_no_server_url_anywhere_is_a_config_error_saying_where_to_set_one(
    make_sandbox: MakeSandbox, tmp_path: Any
) -> None:
    settings = Settings(state_dir=tmp_path, server_url=None)
    with pytest.raises(SandboxConfigError, match=r"spec\.serverURL.*CRAFT_SERVER_URL") as caught:
        build_pod(make_sandbox(), settings)
    assert caught.value.reason == "NoServerURL"


def test_the_server_url_is_a_plain_env_var_and_the_pat_is_not_in_the_spec(
    make_sandbox: MakeSandbox, settings: Settings
) -> None:
    pod = build_pod(make_sandbox(), settings)
    assert env(pod) == {
        "ONYX_SERVER_URL": {"name": "ONYX_SERVER_URL", "value": "http://onyx.invalid:8080"}
    }
    assert "alice-credentials" not in json.dumps(pod), "no reference to the PAT's Secret"


def test_the_pat_is_delivered_into_a_memory_backed_volume_at_run_onyx(
    make_sandbox: MakeSandbox, settings: Settings
) -> None:
    pod = build_pod(make_sandbox(), settings)
    volumes = {volume["name"]: volume for volume in pod["spec"]["volumes"]}
    assert volumes["onyx-credentials"] == {
        "name": "onyx-credentials",
        "emptyDir": {"medium": "Memory", "sizeLimit": "1Mi"},
    }
    mounts = {mount["name"]: mount for mount in container(pod)["volumeMounts"]}
    assert mounts["onyx-credentials"]["mountPath"] == "/run/onyx"


# -- resources -----------------------------------------------------------------------------


def test_without_spec_resources_the_settings_defaults_apply(
    make_sandbox: MakeSandbox, settings: Settings
) -> None:
    assert resources_for(make_sandbox(), settings) == {
        "requests": {"cpu": "1", "memory": "2Gi", "ephemeral-storage": "5Gi"},
        "limits": {"cpu": "2", "memory": "10Gi", "ephemeral-storage": "20Gi"},
    }


def test_spec_resources_override_the_defaults_key_by_key(
    make_sandbox: MakeSandbox, settings: Settings
) -> None:
    sandbox = make_sandbox(resources={"requests": {"memory": "3Gi"}, "limits": {"cpu": "4"}})
    assert resources_for(sandbox, settings) == {
        "requests": {"cpu": "1", "memory": "3Gi", "ephemeral-storage": "5Gi"},
        "limits": {"cpu": "4", "memory": "10Gi", "ephemeral-storage": "20Gi"},
    }


def test_spec_resources_may_name_resources_the_defaults_lack(
    make_sandbox: MakeSandbox, settings: Settings
) -> None:
    sandbox = make_sandbox(resources={"limits": {"nvidia.com/gpu": 1}})
    assert resources_for(sandbox, settings)["limits"]["nvidia.com/gpu"] == "1"


def test_a_request_above_the_default_limit_lifts_the_limit(
    make_sandbox: MakeSandbox, settings: Settings
) -> None:
    sandbox = make_sandbox(resources={"requests": {"cpu": "3", "memory": "12Gi"}})
    result = resources_for(sandbox, settings)
    assert result["requests"]["cpu"] == result["limits"]["cpu"] == "3"
    assert result["requests"]["memory"] == result["limits"]["memory"] == "12Gi"
    assert result["limits"]["ephemeral-storage"] == "20Gi"


def test_a_request_equal_to_a_spec_limit_is_fine(
    make_sandbox: MakeSandbox, settings: Settings
) -> None:
    sandbox = make_sandbox(resources={"requests": {"cpu": "2000m"}, "limits": {"cpu": "2"}})
    assert resources_for(sandbox, settings)["limits"]["cpu"] == "2"


@pytest.mark.parametrize(
    "resources",
    [
        {"requests": {"cpu": "1"}, "limits": {"cpu": str(0.7 + 0.2 + 0.1)}},
        {"requests": {"memory": "3"}, "limits": {"memory": "2.9999999999"}},
        {"requests": {"nvidia.com/gpu": "1"}, "limits": {"nvidia.com/gpu": "0.9999999995"}},
    ],
    ids=["cpu", "memory", "device"],
)
def test_a_limit_equal_to_its_request_at_kubernetes_precision_is_fine(
    make_sandbox: MakeSandbox, settings: Settings, resources: dict[str, Any]
) -> None:
    """Kubernetes reads a quantity to the nano, a finer one rounded up (0.9999999999999999
    is 1): the CRD admits these, and the pod API stores each limit as its request."""
    assert resources_for(make_sandbox(resources=resources), settings)["limits"] == {
        **settings.sandbox_resources["limits"],
        **resources["limits"],
    }


@pytest.mark.parametrize("zero", ["0e20", "0e999", "0.0e999"])
def test_a_zero_written_with_a_large_exponent_is_a_zero_limit(
    make_sandbox: MakeSandbox, settings: Settings, zero: str
) -> None:
    """The CRD admits it (its value is 0) and the pod API stores it as 0."""
    sandbox = make_sandbox(resources={"requests": {"cpu": zero}, "limits": {"memory": zero}})
    resources = resources_for(sandbox, settings)
    assert (resources["requests"]["cpu"], resources["limits"]["memory"]) == (zero, zero)


def test_a_request_above_a_limit_the_spec_sets_is_invalid_resources(
    make_sandbox: MakeSandbox, settings: Settings
) -> None:
    sandbox = unchecked(make_sandbox, {"requests": {"memory": "8Gi"}, "limits": {"memory": "4Gi"}})
    with pytest.raises(
        SandboxConfigError, match=r"requests\.memory \(8Gi\).*limits\.memory \(4Gi\)"
    ) as caught:
        resources_for(sandbox, settings)
    assert caught.value.reason == "InvalidResources"


@pytest.mark.parametrize(
    ("resources", "where"),
    [
        ({"requests": {"cpu": "1e999999999"}}, "requests.cpu"),
        ({"limits": {"memory": "10E"}}, "limits.memory"),
        ({"requests": {"ephemeral-storage": "1e19"}, "limits": {}}, "requests.ephemeral-storage"),
    ],
)
def test_a_quantity_kubernetes_cannot_hold_is_invalid_resources_naming_the_field(
    make_sandbox: MakeSandbox, settings: Settings, resources: dict[str, Any], where: str
) -> None:
    # The CRD and the model refuse such a quantity now; an older CRD admitted it.
    admitted = make_sandbox()
    spec = admitted.spec.model_copy(update={"resources": Resources.model_construct(**resources)})
    sandbox = admitted.model_copy(update={"spec": spec})
    with pytest.raises(SandboxConfigError, match=rf"resources\.{where}: .*2\^63-1") as caught:
        build_pod(sandbox, settings)
    assert caught.value.reason == "InvalidResources"


@pytest.mark.parametrize(
    ("resources", "said"),
    [
        ({"requests": {"nvidia.com/gpu": "1"}}, r"limits\.nvidia\.com/gpu must be set"),
        (
            {"requests": {"nvidia.com/gpu": "1"}, "limits": {"nvidia.com/gpu": "2"}},
            r"requests\.nvidia\.com/gpu \(1\) must equal",
        ),
        ({"limits": {"nvidia.com/gpu": "0.5"}}, r"\(0\.5\) must be a whole number"),
        ({"requests": {"hugepages-2Mi": "64Mi"}}, r"limits\.hugepages-2Mi must be set"),
        ({"limits": {"hugepages-2Mi": "3Mi"}}, r"\(3Mi\) must be a whole number of pages.* 2Mi"),
        ({"limits": {"hugepages-1.5": "3"}}, r"hugepages-1\.5 names no page size"),
    ],
    ids=[
        "request-alone",
        "request-below-limit",
        "fraction",
        "hugepages-request-alone",
        "part-of-a-page",
        "no-page-size",
    ],
)
def test_what_the_pod_api_refuses_of_resources_it_never_overcommits_is_invalid_resources(
    make_sandbox: MakeSandbox, settings: Settings, resources: dict[str, Any], said: str
) -> None:
    """Refused by the pod API, and by the CRD now, but admitted by an older one: said
    before any pod is made."""
    with pytest.raises(SandboxConfigError, match=said) as caught:
        resources_for(unchecked(make_sandbox, resources), settings)
    assert caught.value.reason == "InvalidResources"


def test_a_device_request_alone_takes_its_limit_from_the_settings(
    make_sandbox: MakeSandbox, tmp_path: Any
) -> None:
    settings = Settings(
        state_dir=tmp_path,
        server_url="http://onyx:8080",
        sandbox_resources={"limits": {"nvidia.com/gpu": "1"}},
    )
    sandbox = make_sandbox(resources={"requests": {"nvidia.com/gpu": "1"}})
    assert resources_for(sandbox, settings) == {
        "requests": {"nvidia.com/gpu": "1"},
        "limits": {"nvidia.com/gpu": "1"},
    }


def test_a_device_limit_alone_is_a_request_of_as_many(
    make_sandbox: MakeSandbox, settings: Settings
) -> None:
    sandbox = make_sandbox(resources={"limits": {"nvidia.com/gpu": "1", "hugepages-2Mi": "64Mi"}})
    resources = resources_for(sandbox, settings)
    assert resources["limits"]["nvidia.com/gpu"] == "1"
    assert "nvidia.com/gpu" not in resources.get("requests", {})


def test_the_invalid_resources_error_escapes_build_pod_too(
    make_sandbox: MakeSandbox, settings: Settings
) -> None:
    sandbox = unchecked(make_sandbox, {"requests": {"cpu": "3"}, "limits": {"cpu": "2500m"}})
    with pytest.raises(SandboxConfigError) as caught:
        build_pod(sandbox, settings)
    assert caught.value.reason == "InvalidResources"


def test_empty_default_resources_give_only_what_the_spec_sets(
    make_sandbox: MakeSandbox, tmp_path: Any
) -> None:
    settings = Settings(state_dir=tmp_path, server_url="http://onyx:8080", sandbox_resources={})
    assert resources_for(make_sandbox(), settings) == {}
    sandbox = make_sandbox(resources={"requests": {"cpu": "1"}})
    assert resources_for(sandbox, settings) == {"requests": {"cpu": "1"}}


def test_resources_for_does_not_change_the_settings(
    make_sandbox: MakeSandbox, settings: Settings
) -> None:
    before = {key: dict(value) for key, value in settings.sandbox_resources.items()}
    resources_for(make_sandbox(resources={"requests": {"cpu": "8"}}), settings)
    assert settings.sandbox_resources == before


# -- volumes -------------------------------------------------------------------------------


def test_exec_mode_mounts_an_empty_dir_at_the_library_path(
    make_sandbox: MakeSandbox, settings: Settings
) -> None:
    pod = build_pod(make_sandbox(), settings)
    volumes = {volume["name"]: volume for volume in pod["spec"]["volumes"]}
    assert volumes["user-library"] == {"name": "user-library", "emptyDir": {}}
    mounts = {mount["name"]: mount for mount in container(pod)["volumeMounts"]}
    assert mounts["user-library"] == {"name": "user-library", "mountPath": LIBRARY_MOUNT}
    assert LIBRARY_MOUNT == "/workspace/user_library"


def test_job_mode_mounts_the_library_claim(make_sandbox: MakeSandbox, settings: Settings) -> None:
    sandbox = make_sandbox(userLibrary={"mode": "Job"})
    pod = build_pod(sandbox, settings, library_claim="alice-library")
    volumes = {volume["name"]: volume for volume in pod["spec"]["volumes"]}
    assert volumes["user-library"] == {
        "name": "user-library",
        "persistentVolumeClaim": {"claimName": "alice-library"},
    }


def test_job_mode_without_a_claim_is_a_config_error(make_sandbox: MakeSandbox) -> None:
    with pytest.raises(SandboxConfigError) as caught:
        library_volume(make_sandbox(userLibrary={"mode": "Job"}), None)
    assert caught.value.reason == "NoLibraryVolume"


def test_exec_mode_ignores_a_claim_name(make_sandbox: MakeSandbox) -> None:
    assert library_volume(make_sandbox(), "unused") == {"name": "user-library", "emptyDir": {}}


def test_the_skills_configmap_is_mounted_read_only_with_just_skill_md(
    make_sandbox: MakeSandbox, settings: Settings
) -> None:
    pod = build_pod(make_sandbox(), settings)
    volumes = {volume["name"]: volume for volume in pod["spec"]["volumes"]}
    assert volumes["skills"]["configMap"] == {
        "name": "alice-skills",
        "items": [{"key": "SKILL.md", "path": "SKILL.md"}],
    }
    mounts = {mount["name"]: mount for mount in container(pod)["volumeMounts"]}
    assert mounts["skills"] == {"name": "skills", "mountPath": SKILLS_MOUNT, "readOnly": True}
    assert SKILLS_MOUNT == "/workspace/skills/company-search"


# -- image and scheduling passthrough ------------------------------------------------------


def test_the_image_comes_from_the_spec_else_the_settings(
    make_sandbox: MakeSandbox, settings: Settings
) -> None:
    assert container(build_pod(make_sandbox(), settings))["image"] == (settings.sandbox_image)
    pinned = make_sandbox(image="registry.example.com/craft:1.4.4")
    assert container(build_pod(pinned, settings))["image"] == ("registry.example.com/craft:1.4.4")


def test_scheduling_fields_are_absent_unless_the_spec_sets_them(
    make_sandbox: MakeSandbox, settings: Settings
) -> None:
    spec = build_pod(make_sandbox(), settings)["spec"]
    assert not {"runtimeClassName", "nodeSelector", "tolerations", "priorityClassName"} & set(spec)


def test_scheduling_fields_pass_through_from_the_spec(
    make_sandbox: MakeSandbox, settings: Settings
) -> None:
    sandbox = make_sandbox(
        runtimeClassName="gvisor",
        priorityClassName="craft-sandbox",
        nodeSelector={"pool": "sandboxes"},
        tolerations=[
            {"key": "dedicated", "operator": "Equal", "value": "craft", "effect": "NoSchedule"},
            {"operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
        ],
    )
    spec = build_pod(sandbox, settings)["spec"]
    assert spec["runtimeClassName"] == "gvisor"
    assert spec["priorityClassName"] == "craft-sandbox"
    assert spec["nodeSelector"] == {"pool": "sandboxes"}
    assert spec["tolerations"] == [
        {"key": "dedicated", "operator": "Equal", "value": "craft", "effect": "NoSchedule"},
        {"operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
    ]


# -- security ------------------------------------------------------------------------------


def test_the_pod_runs_with_the_restricted_security_settings(
    make_sandbox: MakeSandbox, settings: Settings
) -> None:
    pod = build_pod(make_sandbox(), settings)
    spec = pod["spec"]
    assert spec["restartPolicy"] == "Never"
    assert spec["automountServiceAccountToken"] is False
    assert spec["enableServiceLinks"] is False
    assert spec["securityContext"] == {
        "runAsNonRoot": True,
        "runAsUser": 1000,
        "runAsGroup": 1000,
        "fsGroup": 1000,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    context = container(pod)["securityContext"]
    assert context["allowPrivilegeEscalation"] is False
    assert context["capabilities"] == {"drop": ["ALL"]}
    assert context["runAsNonRoot"] is True
    assert context["runAsUser"] == 1000
    assert context["seccompProfile"] == {"type": "RuntimeDefault"}


def test_the_pod_is_owned_labelled_and_annotated_only_with_its_template_hash(
    make_sandbox: MakeSandbox, settings: Settings
) -> None:
    sandbox = make_sandbox()
    metadata = build_pod(sandbox, settings)["metadata"]
    assert metadata["name"] == "alice"
    assert metadata["labels"] == naming.child_labels(sandbox)
    assert metadata["ownerReferences"] == [naming.owner_reference(sandbox)]
    assert set(metadata["annotations"]) == {"craft.onyx.app/pod-template-hash"}


@pytest.mark.parametrize("body", example_bodies())
def test_every_example_becomes_a_valid_pod_that_meets_the_restricted_profile(
    body: dict[str, Any], settings: Settings
) -> None:
    sandbox = parse_sandbox(body)
    claim = "library-claim" if sandbox.spec.user_library.mode == LibraryMode.JOB else None
    pod = build_pod(sandbox, settings, library_claim=claim)
    assert kubernetes_schema_problems(pod) == []
    assert restricted_violations(pod) == []


def test_the_examples_include_job_mode_and_scheduling_options() -> None:
    """Guard: the parametrised example test above covers the interesting branches."""
    sandboxes = [parse_sandbox(param.values[0]) for param in example_bodies()]
    assert any(sandbox.spec.user_library.mode == LibraryMode.JOB for sandbox in sandboxes)
    assert any(sandbox.spec.tolerations for sandbox in sandboxes)
    assert any(sandbox.spec.resources for sandbox in sandboxes)
    assert any(sandbox.spec.workspace for sandbox in sandboxes)


# -- template hash -------------------------------------------------------------------------


def test_the_template_hash_is_stable_for_the_same_inputs(
    make_sandbox: MakeSandbox, settings: Settings
) -> None:
    first = build_pod(make_sandbox(), settings)
    second = build_pod(make_sandbox(), settings)
    assert first == second
    hash_value = first["metadata"]["annotations"]["craft.onyx.app/pod-template-hash"]
    assert len(hash_value) == 16
    assert int(hash_value, 16) >= 0


def test_the_template_hash_ignores_key_order() -> None:
    assert template_hash({"a": 1, "b": {"c": 2, "d": 3}}) == template_hash(
        {"b": {"d": 3, "c": 2}, "a": 1}
    )


POD_CHANGES: list[Any] = [
    pytest.param({"image": "other:1"}, id="image"),
    pytest.param({"serverURL": "https://other.example.com"}, id="server-url"),
    pytest.param({"resources": {"requests": {"cpu": "1500m"}}}, id="resources"),
    pytest.param({"runtimeClassName": "gvisor"}, id="runtime-class"),
    pytest.param({"nodeSelector": {"pool": "b"}}, id="node-selector"),
    pytest.param({"tolerations": [{"operator": "Exists"}]}, id="tolerations"),
    pytest.param({"priorityClassName": "high"}, id="priority-class"),
]

NON_POD_CHANGES: list[Any] = [
    pytest.param({"sources": [{"name": "slack"}]}, id="sources"),
    pytest.param({"suspend": False}, id="suspend-default"),
    pytest.param({"idleTimeout": "1h"}, id="idle-timeout"),
    pytest.param({"credentials": {"lifetime": "24h"}}, id="credential-lifetime"),
    pytest.param({"userLibrary": {"exclude": ["*.tmp"]}}, id="library-exclude"),
]


def _hash(pod: dict[str, Any]) -> str:
    value = pod["metadata"]["annotations"]["craft.onyx.app/pod-template-hash"]
    assert isinstance(value, str)
    return value


@pytest.mark.parametrize("change", POD_CHANGES)
def test_the_template_hash_changes_when_the_pod_changes(
    make_sandbox: MakeSandbox, settings: Settings, change: dict[str, Any]
) -> None:
    before = build_pod(make_sandbox(), settings)
    after = build_pod(make_sandbox(**change), settings)
    assert before["spec"] != after["spec"]
    assert _hash(before) != _hash(after)


@pytest.mark.parametrize("change", NON_POD_CHANGES)
def test_the_template_hash_stays_when_the_pod_does_not_change(
    make_sandbox: MakeSandbox, settings: Settings, change: dict[str, Any]
) -> None:
    before = build_pod(make_sandbox(), settings)
    after = build_pod(make_sandbox(**change), settings)
    assert before == after


def test_a_job_mode_claim_change_changes_the_template_hash(
    make_sandbox: MakeSandbox, settings: Settings
) -> None:
    sandbox = make_sandbox(userLibrary={"mode": "Job"})
    first = build_pod(sandbox, settings, library_claim="a")
    second = build_pod(sandbox, settings, library_claim="b")
    assert _hash(first) != _hash(second)


def test_the_template_hash_covers_everything_but_itself(
    make_sandbox: MakeSandbox, settings: Settings
) -> None:
    pod = build_pod(make_sandbox(), settings)
    recorded = pod["metadata"]["annotations"].pop("craft.onyx.app/pod-template-hash")
    assert template_hash(pod) == recorded


def test_a_spec_limit_below_the_default_request_lowers_that_request(
    make_sandbox: MakeSandbox, settings: Settings
) -> None:
    """The user set only a limit: like Kubernetes, the request follows it down (no error
    about a request the user never wrote)."""
    sandbox = make_sandbox(resources={"limits": {"memory": "1Gi"}})
    result = resources_for(sandbox, settings)
    assert result["requests"]["memory"] == result["limits"]["memory"] == "1Gi"
    assert result["requests"]["cpu"] == "1"


def test_the_schema_and_profile_checks_would_catch_a_weakened_pod(
    make_sandbox: MakeSandbox, settings: Settings
) -> None:
    """Guard: the checks used on every example are not vacuous."""
    pod = build_pod(make_sandbox(), settings)
    del pod["spec"]["securityContext"]["seccompProfile"]
    del container(pod)["securityContext"]["seccompProfile"]
    container(pod)["securityContext"]["capabilities"] = {"add": ["NET_ADMIN"]}
    assert restricted_violations(pod)
    container(pod)["imagePullPolicy"] = 3
    assert kubernetes_schema_problems(pod)
