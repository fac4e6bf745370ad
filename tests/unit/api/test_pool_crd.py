"""The committed CraftSandboxPool CRD is what ``craft-operator crd --pool`` prints, and the
pydantic models agree with it (the API server's view) on what a valid pool is."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from craft_operator.api.pool import CraftSandboxPoolSpec, InvalidPoolError, parse_pool
from craft_operator.api.pool_crd import build_pool_crd, pool_crd_yaml
from craft_operator.cli import main
from tests.support.crd_validation import CrdValidator
from tests.unit.api.samples import CRD_FILE

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[3]
POOL_CRD_FILE = REPO / "crds" / "craftsandboxpools.craft.onyx.app.yaml"
EXAMPLE = REPO / "manifests" / "examples" / "pools" / "warm-pool.yaml"
REGENERATE = "run `make crd`"


def pool(name: str = "standard", **spec: Any) -> dict[str, Any]:
    """The smallest pool manifest, with extra spec fields."""
    return {
        "apiVersion": "craft.onyx.app/v1alpha1",
        "kind": "CraftSandboxPool",
        "metadata": {"name": name},
        "spec": {"replicas": 3, **spec},
    }


def schema_errors(manifest: dict[str, Any]) -> list[str]:
    return CrdValidator.from_file(POOL_CRD_FILE).admit_create(manifest).messages


def model_accepts(manifest: dict[str, Any]) -> bool:
    try:
        parse_pool(manifest)
    except InvalidPoolError:
        return False
    return True


def test_the_crd_command_prints_the_committed_file_byte_for_byte() -> None:
    result = CliRunner().invoke(main, ["crd", "--pool"])
    assert result.exit_code == 0, result.output
    assert result.stdout_bytes == POOL_CRD_FILE.read_bytes(), f"crds/ is stale: {REGENERATE}"


def test_the_sandbox_crd_is_still_the_default_output() -> None:
    result = CliRunner().invoke(main, ["crd"])
    assert result.stdout_bytes == CRD_FILE.read_bytes()


def test_asking_for_two_crds_at_once_is_refused() -> None:
    result = CliRunner().invoke(main, ["crd", "--pool", "--policy"])
    assert result.exit_code != 0


def test_the_yaml_is_the_crd_object_and_ships_with_the_other_crds() -> None:
    assert yaml.safe_load(pool_crd_yaml()) == build_pool_crd()
    kustomization = yaml.safe_load((REPO / "crds" / "kustomization.yaml").read_text())
    assert POOL_CRD_FILE.name in kustomization["resources"]


def test_kubectl_shows_replicas_ready_creating_claimed_the_ready_reason_and_age() -> None:
    [version] = build_pool_crd()["spec"]["versions"]
    columns = {
        column["name"]: column.get("priority", 0) for column in version["additionalPrinterColumns"]
    }
    assert columns == {
        "Replicas": 0,
        "Ready": 0,
        "Creating": 0,
        "Claimed": 0,
        "Status": 0,
        "Pods": 1,  # -o wide: every unclaimed pod, of any template or shape
        "Age": 0,
    }
    assert version["subresources"]["scale"]["specReplicasPath"] == ".spec.replicas"


def test_the_scale_subresource_gives_an_autoscaler_the_selector_of_the_unclaimed_pods() -> None:
    """A HorizontalPodAutoscaler refuses to scale a target whose scale has no selector."""
    [version] = build_pool_crd()["spec"]["versions"]
    assert version["subresources"]["scale"]["labelSelectorPath"] == ".status.selector"
    status = version["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]
    assert status["selector"]["type"] == "string"


def test_replicas_may_be_left_to_an_autoscaler() -> None:
    """A manifest without replicas gets one pod, and a GitOps sync then never undoes what
    kubectl scale or an autoscaler set."""
    [version] = build_pool_crd()["spec"]["versions"]
    spec = version["schema"]["openAPIV3Schema"]["properties"]["spec"]
    assert "replicas" not in spec.get("required", [])
    assert spec["properties"]["replicas"]["default"] == 1
    assert CraftSandboxPoolSpec().replicas == 1


def test_every_spec_field_is_explained() -> None:
    [version] = build_pool_crd()["spec"]["versions"]
    spec = version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    assert set(spec) == {
        "replicas",
        "image",
        "resources",
        "runtimeClassName",
        "nodeSelector",
        "tolerations",
        "priorityClassName",
    }
    assert all(field.get("description") for field in spec.values())


def test_schema_and_model_both_accept_the_example() -> None:
    manifest = yaml.safe_load(EXAMPLE.read_text())
    assert schema_errors(manifest) == []
    assert model_accepts(manifest)


VALID = {
    "zero-replicas": pool(replicas=0),
    "no-replicas": {**pool(), "spec": {}},
    "five-hundred-replicas": pool(replicas=500),
    "name-of-63-characters": pool(name="p" * 63),
    "every-pod-setting": pool(
        image="registry.example.com/sandbox:1",
        resources={"requests": {"cpu": "500m"}, "limits": {"memory": "4Gi"}},
        runtimeClassName="gvisor",
        nodeSelector={"pool": "sandboxes"},
        tolerations=[{"key": "k", "operator": "Exists", "effect": "NoSchedule"}],
        priorityClassName="warm",
    ),
}
INVALID = {
    "negative-replicas": pool(replicas=-1),
    "too-many-replicas": pool(replicas=501),
    "image-with-a-space": pool(image="craft sandbox"),
    "bad-quantity": pool(resources={"limits": {"cpu": "two"}}),
    "bad-toleration-effect": pool(tolerations=[{"effect": "Sometimes"}]),
    "too-many-tolerations": pool(tolerations=[{"key": "k"}] * 33),
}
#: What only the API server checks: the object's name (the model does not read it).
SCHEMA_ONLY = {
    "name-of-64-characters": pool(name="p" * 64),
    "name-not-a-dns-label": pool(name="Standard"),
}


@pytest.mark.parametrize("name", VALID)
def test_schema_and_model_both_accept(name: str) -> None:
    assert schema_errors(VALID[name]) == []
    assert model_accepts(VALID[name])


@pytest.mark.parametrize("name", INVALID)
def test_schema_and_model_both_reject(name: str) -> None:
    assert schema_errors(INVALID[name]) != []
    assert not model_accepts(INVALID[name])


@pytest.mark.parametrize("name", SCHEMA_ONLY)
def test_the_schema_rejects_names_the_pods_could_not_carry(name: str) -> None:
    assert schema_errors(SCHEMA_ONLY[name]) != []


def test_the_pod_settings_have_the_sandbox_rules() -> None:
    sandbox_crd = yaml.safe_load(CRD_FILE.read_text())
    pool_crd = build_pool_crd()

    def spec_of(crd: dict[str, Any]) -> dict[str, Any]:
        schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
        return dict(schema["properties"]["spec"]["properties"])

    sandbox, pooled = spec_of(sandbox_crd), spec_of(pool_crd)
    for field in ("image", "resources", "runtimeClassName", "nodeSelector", "tolerations"):
        without_words = [
            {
                key: value
                for key, value in copy.deepcopy(side[field]).items()
                if key != "description"
            }
            for side in (sandbox, pooled)
        ]
        assert without_words[0] == without_words[1], field


def test_an_unreadable_status_does_not_make_the_pool_unreadable() -> None:
    manifest = {**pool(), "status": {"ready": "many"}}
    assert parse_pool(manifest).status.ready is None
