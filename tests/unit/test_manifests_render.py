"""The kustomize manifests, as the API server and the operator would take them.

Two layers: every YAML file under ``manifests/`` is checked against the Kubernetes 1.33
schemas in strict mode (pure Python, runs everywhere), and every kustomization is rendered
with ``kubectl kustomize`` and its output checked the same way (with the kubectl built with
the control plane in ``$CRAFT_CONTROLPLANE_BIN`` where that is set, else the one on PATH;
skipped where there is neither). On top, the pieces must fit each other: the StatefulSet's
arguments are ones the CLI accepts, its probe hits the endpoint it serves, its mounts are
where its settings point, the settings are real settings, and the sandbox NetworkPolicy
selects the pods the operator builds. The CraftSandbox examples in ``manifests/examples``
are checked by ``tests/unit/api/test_manifests.py``.
"""

from __future__ import annotations

import ipaddress
import os
import re
import shutil
import subprocess
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import jsonpatch
import pytest
import yaml
from click.testing import CliRunner

from craft_operator.api.crd import CRD_ANNOTATIONS
from craft_operator.api.parse import parse_sandbox
from craft_operator.api.pool import parse_pool
from craft_operator.builders.pod import build_pod
from craft_operator.builders.pool import build_pool_pod
from craft_operator.builders.quantities import parse_quantity
from craft_operator.cli import main
from craft_operator.config import Settings, load_settings
from craft_operator.credentials.keyring import KeyRing
from craft_operator.devtools import onyx_api
from craft_operator.peering.options import POD_NAME_VARIABLE, resolve_peering
from craft_operator.reconciler.egress import restricts_egress
from tests.support.crd_validation import validate_create
from tests.support.peering_crd import PEERING_GROUP, peering_problems
from tests.support.policy import policy_validator
from tests.support.pss import restricted_violations
from tests.support.schemas import KUBERNETES_VERSION, kubernetes_schema_problems
from tests.support.sync_job import sample_sync_job

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]
MANIFESTS = REPO / "manifests"
BASE = MANIFESTS / "base"
DEV = MANIFESTS / "overlays" / "dev"
ALL_NAMESPACES = MANIFESTS / "overlays" / "all-namespaces"
SANDBOX_NAMESPACE = MANIFESTS / "sandbox-namespace"
EXAMPLES = MANIFESTS / "examples"
KUSTOMIZATIONS = sorted(
    path.parent
    for path in [*MANIFESTS.rglob("kustomization.yaml"), REPO / "crds" / "kustomization.yaml"]
)
MANIFEST_FILES = sorted(
    path
    for path in MANIFESTS.rglob("*.yaml")
    if EXAMPLES not in path.parents and path.name != "kustomization.yaml"
)


def find_kubectl() -> str | None:
    """The kubectl built with the control plane (``$CRAFT_CONTROLPLANE_BIN``, as CI sets
    it), else the one on PATH; None where there is neither."""
    built = os.environ.get("CRAFT_CONTROLPLANE_BIN")
    return (shutil.which("kubectl", path=built) if built else None) or shutil.which("kubectl")


KUBECTL = find_kubectl()
needs_kubectl = pytest.mark.skipif(
    KUBECTL is None,
    reason="kubectl is neither in $CRAFT_CONTROLPLANE_BIN (hack/controlplane/build.sh builds "
    "one) nor on PATH: `kubectl kustomize` output is checked where it is "
    "(the per-file schema checks below still run)",
)
#: API groups of third-party CRDs (Prometheus Operator) for which no schema is bundled:
#: only their shape is checked here; any other unknown group fails.
THIRD_PARTY_GROUPS = {"monitoring.coreos.com"}
POD_TEMPLATE_KINDS = {"Deployment", "StatefulSet", "DaemonSet", "Job", "ReplicaSet"}
DNS_PORT = 53


def relative(path: Path) -> str:
    return str(path.relative_to(REPO))


def documents(path: Path) -> list[dict[str, Any]]:
    """The non-empty YAML documents of a file."""
    with path.open(encoding="utf-8") as stream:
        return [doc for doc in yaml.safe_load_all(stream) if doc]


def render(directory: Path) -> list[dict[str, Any]]:
    """``kubectl kustomize <directory>``, parsed."""
    assert KUBECTL is not None
    result = subprocess.run(
        [KUBECTL, "kustomize", str(directory)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, f"kubectl kustomize {relative(directory)}: {result.stderr}"
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def admission_problems(obj: Mapping[str, Any]) -> list[str]:
    """What the API server would refuse: CraftSandboxes by the CRD, the rest by Kubernetes."""
    if obj.get("kind") == "CraftSandbox":
        return validate_create(obj)
    if obj.get("kind") == "CraftSandboxPolicy":
        return policy_validator().admit_create(obj).messages
    if str(obj.get("apiVersion", "")).split("/")[0] == PEERING_GROUP:
        return peering_problems(obj)
    if str(obj.get("apiVersion", "")).split("/")[0] in THIRD_PARTY_GROUPS:
        has_shape = obj.get("kind") and obj.get("metadata", {}).get("name") and obj.get("spec")
        return [] if has_shape else ["kind, metadata.name and spec are required"]
    return kubernetes_schema_problems(obj)


def pod_of(obj: Mapping[str, Any]) -> dict[str, Any] | None:
    """The pod an object runs (its template as a Pod), or None for objects without pods."""
    if obj.get("kind") == "Pod":
        return dict(obj)
    if obj.get("kind") in POD_TEMPLATE_KINDS:
        template = obj["spec"]["template"]
        return {"apiVersion": "v1", "kind": "Pod", **template}
    return None


def find(objects: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    matches = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    assert len(matches) == 1, f"expected one {kind} {name}, found {len(matches)}"
    return matches[0]


def all_files_objects(*directories: Path) -> list[dict[str, Any]]:
    return [
        doc
        for directory in directories
        for path in sorted(directory.glob("*.yaml"))
        if path.name != "kustomization.yaml"
        for doc in documents(path)
    ]


def selector_matches(selector: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """A label selector with matchLabels only (what our manifests use) against labels."""
    assert set(selector) <= {"matchLabels"}, "only matchLabels selectors are evaluated here"
    return all(labels.get(key) == value for key, value in selector["matchLabels"].items())


def settings_env(configmap: Mapping[str, Any]) -> dict[str, str]:
    return {key: str(value) for key, value in (configmap.get("data") or {}).items()}


def dev_settings_patch() -> dict[str, str]:
    """The data the dev overlay merges into the settings ConfigMap."""
    kustomization = documents(DEV / "kustomization.yaml")[0]
    for patch in kustomization["patches"]:
        if patch["target"] == {"kind": "ConfigMap", "name": "craft-operator-settings"}:
            return settings_env(yaml.safe_load(patch["patch"]))
    raise AssertionError("the dev overlay does not patch the settings ConfigMap")


@pytest.fixture(scope="module")
def deployment() -> dict[str, Any]:
    """The operator's workload (a StatefulSet: an active/standby pair)."""
    return find(documents(BASE / "statefulset.yaml"), "StatefulSet", "craft-operator")


@pytest.fixture(scope="module")
def container(deployment: dict[str, Any]) -> dict[str, Any]:
    containers = deployment["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1
    return dict(containers[0])


@pytest.fixture(scope="module")
def base_settings() -> dict[str, str]:
    configmap = find(documents(BASE / "configmap.yaml"), "ConfigMap", "craft-operator-settings")
    return settings_env(configmap)


@pytest.fixture(scope="module")
def library_policy() -> dict[str, Any]:
    return find(
        documents(SANDBOX_NAMESPACE / "library-sync-networkpolicy.yaml"),
        "NetworkPolicy",
        "craft-library-sync-egress",
    )


@pytest.fixture(scope="module")
def policy() -> dict[str, Any]:
    return find(
        documents(SANDBOX_NAMESPACE / "networkpolicy.yaml"), "NetworkPolicy", "craft-sandbox-egress"
    )


def iter_pods() -> Iterator[Any]:
    for path in MANIFEST_FILES:
        for obj in documents(path):
            pod = pod_of(obj)
            if pod is not None:
                yield pytest.param(pod, id=f"{relative(path)}:{obj['metadata']['name']}")


# Every file, every rendered kustomization.


def test_there_is_a_base_overlays_for_dev_and_all_namespaces_and_a_sandbox_namespace() -> None:
    assert {BASE, DEV, ALL_NAMESPACES, SANDBOX_NAMESPACE, REPO / "crds"} <= set(KUSTOMIZATIONS)


@pytest.mark.parametrize("path", MANIFEST_FILES, ids=relative)
def test_every_manifest_file_is_accepted_by_the_api_server_schemas(path: Path) -> None:
    problems = {
        f"{obj.get('kind')}/{obj.get('metadata', {}).get('name')}": admission_problems(obj)
        for obj in documents(path)
    }
    assert problems
    assert {name: found for name, found in problems.items() if found} == {}, KUBERNETES_VERSION


@pytest.mark.parametrize("path", MANIFEST_FILES, ids=relative)
def test_no_network_policy_writes_an_empty_rule_list_the_api_server_drops(path: Path) -> None:
    """``ingress: []`` is stored as no field: every apply then changes the object again
    (a new generation; ``kubectl diff`` is never clean under GitOps). With Ingress in
    policyTypes, no rules already denies all ingress."""
    for obj in documents(path):
        if obj.get("kind") == "NetworkPolicy":
            spec = obj.get("spec") or {}
            assert [key for key in ("ingress", "egress") if spec.get(key) == []] == []


@needs_kubectl
@pytest.mark.parametrize("directory", KUSTOMIZATIONS, ids=relative)
def test_every_kustomization_renders_to_objects_the_api_server_accepts(directory: Path) -> None:
    objects = render(directory)
    assert objects
    problems = {
        f"{obj['kind']}/{obj['metadata']['name']}": admission_problems(obj) for obj in objects
    }
    assert {name: found for name, found in problems.items() if found} == {}
    keys = [
        (obj["kind"], obj["metadata"].get("namespace"), obj["metadata"]["name"]) for obj in objects
    ]
    assert len(keys) == len(set(keys)), "an object is defined twice"


@pytest.mark.parametrize("pod", list(iter_pods()))
def test_every_pod_in_the_manifests_meets_the_restricted_pod_security_profile(
    pod: dict[str, Any],
) -> None:
    # craft-system and the sandbox namespaces enforce `restricted`: anything less is refused.
    assert restricted_violations(pod) == []


@needs_kubectl
def test_the_base_installs_namespace_rbac_settings_and_operator_without_secrets() -> None:
    objects = render(BASE)
    kinds = {(obj["kind"], obj["metadata"]["name"]) for obj in objects}
    assert kinds == {
        ("Namespace", "craft-system"),
        ("Service", "craft-operator"),
        ("ServiceAccount", "craft-operator"),
        ("ClusterRole", "craft-operator"),
        ("ClusterRoleBinding", "craft-operator"),
        ("Role", "craft-operator"),
        ("RoleBinding", "craft-operator"),
        ("ConfigMap", "craft-operator-settings"),
        ("ClusterKopfPeering", "craft-operator"),
        ("StatefulSet", "craft-operator"),
        ("PodDisruptionBudget", "craft-operator"),
    }
    namespaced = [obj for obj in objects if "namespace" in obj["metadata"]]
    assert {obj["metadata"]["namespace"] for obj in namespaced} == {"craft-system"}
    service = find(objects, "Service", "craft-operator")
    statefulset = find(objects, "StatefulSet", "craft-operator")
    assert statefulset["spec"]["serviceName"] == service["metadata"]["name"]
    assert service["spec"]["clusterIP"] == "None"
    pod_labels = statefulset["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= pod_labels.items()


#: Namespaced kinds the default install must not grant cluster-wide: the sandboxes' secrets,
#: pods and a shell in them, and every other child kind.
NAMESPACED_CHILDREN = {
    ("", "secrets"),
    ("", "pods"),
    ("", "pods/exec"),
    ("", "configmaps"),
    ("", "persistentvolumeclaims"),
    ("", "events"),
    ("batch", "jobs"),
    ("craft.onyx.app", "craftsandboxes"),
    ("networking.k8s.io", "networkpolicies"),
}


def cluster_wide_grants(objects: list[dict[str, Any]]) -> set[tuple[str, str]]:
    """(group, resource) of every rule a ClusterRole bound by a ClusterRoleBinding grants."""
    bound = {obj["roleRef"]["name"] for obj in objects if obj["kind"] == "ClusterRoleBinding"}
    return {
        (group, resource)
        for obj in objects
        if obj["kind"] == "ClusterRole" and obj["metadata"]["name"] in bound
        for rule in obj["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
    }


@needs_kubectl
def test_the_default_install_grants_nothing_cluster_wide_on_secrets_pods_or_exec() -> None:
    objects = render(BASE)
    assert cluster_wide_grants(objects) == {
        ("kopf.dev", "clusterkopfpeerings"),
        ("craft.onyx.app", "craftsandboxpolicies"),
        ("", "namespaces"),  # their tenant labels: list and watch, nothing else
    }
    assert not cluster_wide_grants(objects) & NAMESPACED_CHILDREN
    bindings = [obj for obj in objects if obj["kind"] == "RoleBinding"]
    assert [binding["roleRef"]["kind"] for binding in bindings] == ["Role"]
    # Its Role in craft-system reads the SKILL.md template, nothing else.
    role = find(objects, "Role", "craft-operator")
    assert role["metadata"]["namespace"] == "craft-system"
    assert role["rules"] == [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]}]


@needs_kubectl
def test_the_sandbox_namespace_binds_its_role_to_the_operator_of_the_base() -> None:
    objects = render(SANDBOX_NAMESPACE)
    binding = find(objects, "RoleBinding", "craft-operator")
    account = find(render(BASE), "ServiceAccount", "craft-operator")
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": find(objects, "Role", "craft-operator")["metadata"]["name"],
    }
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "craft-operator", "namespace": "craft-system"}
    ]
    assert account["metadata"]["namespace"] == "craft-system"
    # The dev overlay puts it in its sandbox namespace, still bound to craft-system's account.
    dev = [o for o in render(DEV) if o["kind"] == "RoleBinding" and
           o["metadata"]["namespace"] == "craft-sandboxes"]  # fmt: skip
    assert [b["subjects"] for b in dev] == [binding["subjects"]]


@needs_kubectl
def test_the_all_namespaces_overlay_grants_the_sandbox_role_cluster_wide_and_serves_all() -> None:
    objects = render(ALL_NAMESPACES)
    sandbox_role = find(render(SANDBOX_NAMESPACE), "Role", "craft-operator")
    wide = find(objects, "ClusterRole", "craft-operator-all-namespaces")
    crds = {"apiGroups": ["apiextensions.k8s.io"], "resources": ["customresourcedefinitions"],
            "verbs": ["list", "watch"]}  # fmt: skip
    assert wide["rules"] == [crds, *sandbox_role["rules"]]
    assert cluster_wide_grants(objects) >= NAMESPACED_CHILDREN
    settings = find(objects, "ConfigMap", "craft-operator-settings")
    assert settings["data"]["CRAFT_NAMESPACES"] == ""


def test_no_install_includes_the_crds_and_none_copies_them() -> None:
    # Deleting or pruning the operator's install must never delete a CRD: every
    # CraftSandbox would go with it, its PAT never revoked (README, Uninstall).
    including = [
        relative(path)
        for path in MANIFESTS.rglob("kustomization.yaml")
        for resource in documents(path)[0].get("resources") or []
        if resource.rstrip("/").endswith("crds")
    ]
    assert including == []
    copies = [
        relative(path)
        for path in MANIFESTS.rglob("*.yaml")
        for doc in documents(path)
        if doc.get("kind") == "CustomResourceDefinition"
    ]
    assert copies == []


def test_every_crd_is_left_alone_by_gitops_pruning() -> None:
    crds = [
        doc
        for path in sorted((REPO / "crds").glob("*.yaml"))
        for doc in documents(path)
        if doc.get("kind") == "CustomResourceDefinition"
    ]
    annotations = {doc["metadata"]["name"]: doc["metadata"].get("annotations") for doc in crds}
    assert len(annotations) == 4
    assert all(each == CRD_ANNOTATIONS for each in annotations.values()), annotations


# The operator StatefulSet: an active/standby pair.


def argument(args: list[str], option: str) -> str:
    return args[args.index(option) + 1]


def test_the_operator_runs_two_replicas_started_in_parallel_and_evicted_one_by_one(
    deployment: dict[str, Any],
) -> None:
    spec = deployment["spec"]
    assert spec["replicas"] == 2
    # Ordered start would keep the standby from starting while the first pod cannot.
    assert spec["podManagementPolicy"] == "Parallel"
    anti = spec["template"]["spec"]["affinity"]["podAntiAffinity"]
    term = anti["preferredDuringSchedulingIgnoredDuringExecution"][0]["podAffinityTerm"]
    assert term["topologyKey"] == "kubernetes.io/hostname"
    assert selector_matches(term["labelSelector"], spec["template"]["metadata"]["labels"])
    budget = find(
        documents(BASE / "poddisruptionbudget.yaml"), "PodDisruptionBudget", "craft-operator"
    )
    assert budget["spec"]["maxUnavailable"] == 1  # a drain takes one replica at a time
    assert selector_matches(budget["spec"]["selector"], spec["template"]["metadata"]["labels"])


def test_the_operator_arguments_are_accepted_by_the_cli(container: dict[str, Any]) -> None:
    result = CliRunner().invoke(main, [*container["args"], "--help"])
    assert result.exit_code == 0, result.output
    assert container["args"][0] == "run"
    assert "--standalone" not in container["args"]


def test_the_replicas_peer_through_the_base_peering_object_with_distinct_priorities(
    deployment: dict[str, Any], container: dict[str, Any]
) -> None:
    args = container["args"]
    peering = find(documents(BASE / "peering.yaml"), "ClusterKopfPeering", "craft-operator")
    assert argument(args, "--peering") == peering["metadata"]["name"]
    assert "--priority-from-ordinal" in args
    name = deployment["metadata"]["name"]
    priorities = [
        resolve_peering(
            name=argument(args, "--peering"),
            priority=int(argument(args, "--priority")),
            from_ordinal=True,
            pod_name=f"{name}-{ordinal}",
        ).priority
        for ordinal in range(deployment["spec"]["replicas"])
    ]
    assert priorities == sorted(set(priorities), reverse=True), "pod -0 first, none equal"
    env = {item["name"]: item for item in container["env"]}
    for variable in (POD_NAME_VARIABLE, "POD_ID"):  # POD_ID: kopf's identity of the replica
        assert env[variable]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"


def test_the_liveness_probe_asks_the_endpoint_the_operator_serves(
    container: dict[str, Any],
) -> None:
    args = container["args"]
    served = urlsplit(args[args.index("--liveness") + 1])
    ports = {port["name"]: port["containerPort"] for port in container["ports"]}
    for probe in (container["livenessProbe"], container["startupProbe"]):
        get = probe["httpGet"]
        assert get["path"] == served.path
        assert ports[get["port"]] == served.port
    assert served.hostname == "0.0.0.0"


def test_the_metrics_port_is_the_configured_one(
    container: dict[str, Any], base_settings: dict[str, str]
) -> None:
    ports = {port["name"]: port["containerPort"] for port in container["ports"]}
    assert ports["metrics"] == int(base_settings["CRAFT_METRICS_PORT"]) == 9090


def test_the_operator_container_is_locked_down_with_writable_state_only_where_settings_say(
    deployment: dict[str, Any], container: dict[str, Any], base_settings: dict[str, str]
) -> None:
    security = container["securityContext"]
    assert security["readOnlyRootFilesystem"] is True
    assert security["capabilities"] == {"drop": ["ALL"]}
    assert container["resources"]["requests"]
    assert container["resources"]["limits"]
    volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    assert "emptyDir" in volumes[mounts[base_settings["CRAFT_STATE_DIR"]]]
    assert "emptyDir" in volumes[mounts["/tmp"]]


def test_the_key_ring_file_is_the_mounted_secret(
    deployment: dict[str, Any], container: dict[str, Any]
) -> None:
    env = {item["name"]: item for item in container["env"]}
    keys_file = Path(env["CRAFT_ENCRYPTION_KEYS_FILE"]["value"])
    mount = next(m for m in container["volumeMounts"] if Path(m["mountPath"]) == keys_file.parent)
    assert mount["readOnly"] is True
    volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
    secret = volumes[mount["name"]]["secret"]
    assert secret["secretName"] == "craft-operator-keys"
    assert "optional" not in secret, "no key ring must stop the operator, not fall back"
    # Readable by the operator's group (fsGroup), by nobody else.
    assert secret["defaultMode"] == 0o440
    assert deployment["spec"]["template"]["spec"]["securityContext"]["fsGroup"] == 1000


def test_the_database_url_comes_from_a_secret(container: dict[str, Any]) -> None:
    env = {item["name"]: item for item in container["env"]}
    ref = env["CRAFT_DATABASE_URL"]["valueFrom"]["secretKeyRef"]
    assert ref["name"] == "craft-operator-database"


def test_the_operator_reads_the_settings_configmap_and_uses_the_rbac_service_account(
    deployment: dict[str, Any], container: dict[str, Any]
) -> None:
    refs = [
        source["configMapRef"]["name"]
        for source in container["envFrom"]
        if "configMapRef" in source
    ]
    assert refs == ["craft-operator-settings"]
    accounts = [doc for doc in documents(BASE / "rbac.yaml") if doc["kind"] == "ServiceAccount"]
    assert (
        deployment["spec"]["template"]["spec"]["serviceAccountName"]
        == accounts[0]["metadata"]["name"]
    )


# Settings.


def test_the_settings_configmap_names_only_real_settings(base_settings: dict[str, str]) -> None:
    known = {f"CRAFT_{name.upper()}" for name in Settings.model_fields}
    commented = {
        line.strip().lstrip("# ").split(":", 1)[0]
        for line in (BASE / "configmap.yaml").read_text(encoding="utf-8").splitlines()
        if line.strip().startswith("# CRAFT_")
    }
    assert commented, "the ConfigMap documents the other settings in comments"
    assert (set(base_settings) | commented) - known == set()
    assert set(dev_settings_patch()) - known == set()
    from_secrets = {"CRAFT_DATABASE_URL", "CRAFT_ENCRYPTION_KEYS"}
    assert known - from_secrets - set(base_settings) - commented == set(), "every setting listed"


@pytest.mark.parametrize("overlay", ["base", "dev"])
def test_the_settings_configmap_loads_as_operator_settings(
    overlay: str, base_settings: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    env = {**base_settings, **(dev_settings_patch() if overlay == "dev" else {})}
    for key in [key for key in os.environ if key.startswith("CRAFT_")]:
        monkeypatch.delenv(key)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    settings = load_settings()
    assert str(settings.state_dir) == "/var/lib/craft-operator"
    # Namespaced by default: the base serves one sandbox namespace, as does dev.
    assert settings.namespaces == ["craft-sandboxes"]
    if overlay == "dev":
        assert settings.namespaces == ["craft-sandboxes"]
        assert settings.sandbox_image == "craft-sandbox:dev"


# The sandbox NetworkPolicy.


def sample_sandbox() -> Any:
    body = documents(DEV / "sample-sandbox.yaml")[0]
    body["metadata"]["uid"] = "0b5e3c7a-4d1f-4a8e-9c2b-7e6f5d4c3b2a"
    return parse_sandbox(body)


def sandbox_and_job_labels() -> tuple[dict[str, str], dict[str, str]]:
    """The labels of a sandbox pod and of a library-sync Job's pod, as the operator builds them."""
    sandbox = sample_sandbox()
    settings = Settings(server_url="http://onyx.test:8080", state_dir=Path("/nonexistent"))
    pod = build_pod(sandbox, settings)
    job = sample_sync_job(sandbox)
    return pod["metadata"]["labels"], job["spec"]["template"]["metadata"]["labels"]


def test_the_sandbox_policy_selects_sandbox_pods_but_not_library_sync_jobs(
    policy: dict[str, Any],
) -> None:
    pod, job = sandbox_and_job_labels()
    # As the operator reads it before it starts a sandbox pod.
    assert restricts_egress(policy, pod)
    assert not restricts_egress(policy, job)


def test_library_sync_job_pods_are_selected_by_their_own_egress_policy(
    library_policy: dict[str, Any],
) -> None:
    pod, job = sandbox_and_job_labels()
    assert restricts_egress(library_policy, job)
    assert not restricts_egress(library_policy, pod)


def documented_overlay_patches() -> dict[str, list[dict[str, Any]]]:
    """The JSON patches of the example overlay in the sandbox-namespace kustomization's
    comment, by the name of the NetworkPolicy they patch."""
    lines = (SANDBOX_NAMESPACE / "kustomization.yaml").read_text().splitlines()
    start = lines.index("#   # overlays/team-a/kustomization.yaml") + 1
    end = lines.index("#", start)
    overlay = yaml.safe_load("\n".join(line.removeprefix("#   ") for line in lines[start:end]))
    return {patch["target"]["name"]: yaml.safe_load(patch["patch"]) for patch in overlay["patches"]}


def never_reaches(rule: Mapping[str, Any], address: str) -> bool:
    """Whether an egress rule's peers exclude ``address`` (no peers: every address)."""
    peers = rule.get("to") or []
    if not peers:
        return False
    for peer in peers:
        block = peer.get("ipBlock")
        if block is None:
            continue  # pod and namespace selectors reach pods, not node or metadata addresses
        ip = ipaddress.ip_address(address)
        if ip in ipaddress.ip_network(block["cidr"]) and not any(
            ip in ipaddress.ip_network(excepted) for excepted in block.get("except") or []
        ):
            return False
    return True


#: The cloud metadata address, and typical API server addresses (a service IP, a node's).
FORBIDDEN_DESTINATIONS = ("169.254.169.254", "10.96.0.1", "172.18.0.2", "192.168.1.10")


def test_the_library_sync_policy_lets_out_dns_and_s3_only_never_metadata_or_the_api_server(
    library_policy: dict[str, Any], policy: dict[str, Any]
) -> None:
    spec = library_policy["spec"]
    assert spec["policyTypes"] == ["Ingress", "Egress"]
    assert spec.get("ingress", []) == []
    dns, s3 = spec["egress"]
    assert dns == policy["spec"]["egress"][0]
    # Until an overlay points it at S3, the S3 rule allows a documentation address only.
    assert s3["to"] == [{"ipBlock": {"cidr": "192.0.2.20/32"}}]
    # The documented patch for AWS S3 lets out public addresses only.
    patched = jsonpatch.apply_patch(
        library_policy, documented_overlay_patches()["craft-library-sync-egress"]
    )
    dns, s3 = patched["spec"]["egress"]
    assert s3["ports"] == [{"protocol": "TCP", "port": 443}]
    for address in FORBIDDEN_DESTINATIONS:
        assert never_reaches(s3, address), address
        assert never_reaches(dns, address), address
    assert not never_reaches(s3, "52.216.0.1")  # an S3 address


@needs_kubectl
def test_the_dev_overlay_points_the_library_sync_policy_at_minio() -> None:
    objects = render(DEV)
    library = find(objects, "NetworkPolicy", "craft-library-sync-egress")
    minio = find(objects, "Deployment", "minio")
    peer = library["spec"]["egress"][1]["to"][0]
    assert peer["namespaceSelector"]["matchLabels"] == {
        "kubernetes.io/metadata.name": minio["metadata"]["namespace"]
    }
    assert selector_matches(peer["podSelector"], minio["spec"]["template"]["metadata"]["labels"])


def test_the_sandbox_policy_denies_ingress_and_lets_out_only_dns_and_the_onyx_api(
    policy: dict[str, Any],
) -> None:
    spec = policy["spec"]
    assert spec["policyTypes"] == ["Ingress", "Egress"]
    assert spec.get("ingress", []) == []
    dns, onyx = spec["egress"]
    assert {(p["protocol"], p["port"]) for p in dns["ports"]} == {
        ("UDP", DNS_PORT),
        ("TCP", DNS_PORT),
    }
    assert dns["to"][0]["podSelector"]["matchLabels"] == {"k8s-app": "kube-dns"}
    # Until an overlay points it at the Onyx API, the second rule allows only an address
    # reserved for documentation (RFC 5737), i.e. nothing.
    assert onyx["to"] == [{"ipBlock": {"cidr": "192.0.2.10/32"}}]


@needs_kubectl
def test_the_dev_overlay_points_the_sandbox_policy_at_the_stand_in_api() -> None:
    objects = render(DEV)
    policy = find(objects, "NetworkPolicy", "craft-sandbox-egress")
    api = find(objects, "Deployment", "onyx-api")
    assert policy["metadata"]["namespace"] == "craft-sandboxes"
    rule = policy["spec"]["egress"][1]
    peer = rule["to"][0]
    assert peer["namespaceSelector"]["matchLabels"] == {
        "kubernetes.io/metadata.name": api["metadata"]["namespace"]
    }
    assert selector_matches(peer["podSelector"], api["spec"]["template"]["metadata"]["labels"])
    api_port = api["spec"]["template"]["spec"]["containers"][0]["ports"][0]["containerPort"]
    assert rule["ports"] == [{"protocol": "TCP", "port": api_port}]
    namespace = find(objects, "Namespace", "craft-sandboxes")
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"


def readme_overlay(tmp_path: Path, name: str) -> Path:
    """The overlay ``overlays/<name>`` written from the README's YAML blocks that open with
    ``# overlays/<name>/<file>``, beside this repository's ``manifests`` as the README has it."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    blocks = re.findall(rf"```yaml\n# overlays/{name}/([a-z.]+)\n(.*?)```", readme, re.DOTALL)
    overlay = tmp_path / "overlays" / name
    overlay.mkdir(parents=True)
    (tmp_path / "manifests").symlink_to(MANIFESTS)
    for file, text in blocks:
        (overlay / file).write_text(text, encoding="utf-8")
    return overlay


@needs_kubectl
def test_the_readme_shows_the_sandbox_namespace_overlay_its_install_applies(
    tmp_path: Path,
) -> None:
    """Install step 2b applies ``overlays/craft-sandboxes``, which the repository does not
    ship: the README shows its files, and they make the namespace, the operator's Role and
    the NetworkPolicies pointed away from the placeholder addresses."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert "\nkubectl apply -k overlays/craft-sandboxes\n" in readme
    overlay = readme_overlay(tmp_path, "craft-sandboxes")
    assert {path.name for path in overlay.iterdir()} == {"kustomization.yaml", "namespace.yaml"}

    objects = render(overlay)

    problems = {
        f"{obj['kind']}/{obj['metadata']['name']}": admission_problems(obj) for obj in objects
    }
    assert {name: found for name, found in problems.items() if found} == {}
    namespace = find(objects, "Namespace", "craft-sandboxes")
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    assert find(objects, "Role", "craft-operator")["metadata"]["namespace"] == "craft-sandboxes"
    pod, job = sandbox_and_job_labels()
    for name, labels in (("craft-sandbox-egress", pod), ("craft-library-sync-egress", job)):
        policy = find(objects, "NetworkPolicy", name)
        assert policy["metadata"]["namespace"] == "craft-sandboxes"
        assert restricts_egress(policy, labels)
        assert "192.0.2." not in str(policy["spec"]["egress"]), "a placeholder is left"


# The dev overlay.


def service_for(objects: list[dict[str, Any]], url: str) -> dict[str, Any]:
    """The Service a cluster-local URL (``<svc>.<ns>.svc.cluster.local:<port>``) reaches."""
    parts = urlsplit(url)
    assert parts.hostname is not None
    name, namespace, *_ = parts.hostname.split(".")
    service = find(objects, "Service", name)
    assert service["metadata"]["namespace"] == namespace
    assert parts.port in {port["port"] for port in service["spec"]["ports"]}
    return service


def test_the_dev_settings_and_database_url_reach_services_the_overlay_defines() -> None:
    objects = all_files_objects(DEV)
    settings = dev_settings_patch()
    service_for(objects, settings["CRAFT_SERVER_URL"])
    service_for(objects, settings["CRAFT_S3_ENDPOINT_URL"])
    database = find(objects, "Secret", "craft-operator-database")["stringData"]["url"]
    postgres = find(objects, "Secret", "craft-dev-postgres")["stringData"]
    parts = urlsplit(database)
    service_for(objects, database)
    assert (parts.username, parts.password, parts.path) == (
        postgres["POSTGRES_USER"],
        postgres["POSTGRES_PASSWORD"],
        f"/{postgres['POSTGRES_DB']}",
    )


def test_the_dev_key_ring_is_a_valid_key_ring() -> None:
    secret = find(all_files_objects(DEV), "Secret", "craft-operator-keys")
    assert KeyRing.parse(secret["stringData"]["keys"])


def test_the_stand_in_api_arguments_parse_and_name_the_sample_user(
    capsys: pytest.CaptureFixture[str],
) -> None:
    api = find(all_files_objects(DEV), "Deployment", "onyx-api")
    container = api["spec"]["template"]["spec"]["containers"][0]
    assert container["command"] == ["python", "-m", "craft_operator.devtools.onyx_api"]
    # The arguments parse (argparse would exit on an unknown one); the module then refuses
    # to create Onyx tables in SQLite, which shows it got past parsing without serving.
    assert onyx_api.main([*container["args"], "--database-url", "sqlite://"]) == 2
    assert "need a Postgres URL" in capsys.readouterr().err
    args = container["args"]
    users = {args[i + 1] for i, arg in enumerate(args) if arg == "--user"}
    assert sample_sandbox().spec.user.id in users


def test_the_dev_images_are_the_locally_built_ones() -> None:
    kustomization = documents(DEV / "kustomization.yaml")[0]
    assert {"name": "craft-operator", "newTag": "dev"} in kustomization["images"]
    assert dev_settings_patch()["CRAFT_SANDBOX_IMAGE"] == "craft-sandbox:dev"


def test_the_dev_sample_sandbox_is_accepted_by_the_crd() -> None:
    assert validate_create(documents(DEV / "sample-sandbox.yaml")[0]) == []


def test_the_secrets_the_readme_says_to_create_are_the_ones_the_operator_reads(
    deployment: dict[str, Any], container: dict[str, Any]
) -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    created = set(re.findall(r"create secret generic ([a-z0-9-]+)", readme))
    read = {source["secretRef"]["name"] for source in container["envFrom"] if "secretRef" in source}
    read |= {
        item["valueFrom"]["secretKeyRef"]["name"]
        for item in container["env"]
        if "secretKeyRef" in item.get("valueFrom", {})
    }
    read |= {
        volume["secret"]["secretName"]
        for volume in deployment["spec"]["template"]["spec"]["volumes"]
        if "secret" in volume
    }
    assert created == read
    dev = {obj["metadata"]["name"] for obj in all_files_objects(DEV) if obj["kind"] == "Secret"}
    assert read <= dev, "the dev overlay provides every Secret the operator reads"


QUOTA = SANDBOX_NAMESPACE / "quota"
#: The sandbox and Job pods the shipped quota is sized for, at once.
QUOTA_SANDBOXES, QUOTA_JOBS = 50, 10


def with_limit_range_defaults(
    container: Mapping[str, Any], limit_range: Mapping[str, Any]
) -> dict[str, dict[str, Any]]:
    """The container's resources as the API server admits them in a namespace with
    ``limit_range``: its defaults fill what the container does not name."""
    (limits,) = (item for item in limit_range["spec"]["limits"] if item["type"] == "Container")
    resources = container.get("resources") or {}
    requests = dict(resources.get("requests") or {})
    maxima = dict(resources.get("limits") or {})
    for name, value in limits["default"].items():
        maxima.setdefault(name, value)
    for name, value in limits["defaultRequest"].items():
        requests.setdefault(name, value)
    return {"requests": requests, "limits": maxima}


def quota_pods() -> dict[str, dict[str, Any]]:
    """A sandbox's pod with the default resources, a warm pool's pod and a library-sync
    Job's pod, as the operator builds them."""
    settings = Settings(server_url="http://onyx.test:8080", state_dir=Path("/nonexistent"))
    body = documents(EXAMPLES / "minimal.yaml")[0]  # every setting from the operator
    body["metadata"].update(namespace="team-a", uid="u-1", generation=1)
    sandbox = parse_sandbox(body)
    pool = parse_pool(
        {
            "apiVersion": "craft.onyx.app/v1alpha1",
            "kind": "CraftSandboxPool",
            "metadata": {"name": "warm", "namespace": "team-a", "uid": "p-1", "generation": 1},
            "spec": {"replicas": 10},
        }
    )
    job = sample_sync_job(sandbox)
    return {
        "sandbox": build_pod(sandbox, settings)["spec"],
        "pool": build_pool_pod(pool, settings)["spec"],
        "job": job["spec"]["template"]["spec"],
    }


def test_the_optional_quota_admits_every_pod_the_operator_makes_and_the_sandboxes_it_says() -> None:
    """A namespace with a quota on a resource refuses a pod that does not name it: the
    limit range's defaults must cover what the operator's pods leave out, its maxima must
    let them in, and the quota must hold the sandboxes and Jobs its comment promises."""
    (quota,) = documents(QUOTA / "quota.yaml")
    (limit_range,) = documents(QUOTA / "limitrange.yaml")
    hard = quota["spec"]["hard"]
    (container_limits,) = limit_range["spec"]["limits"]
    totals: dict[str, float] = {}
    for kind, spec in quota_pods().items():
        count = QUOTA_JOBS if kind == "job" else QUOTA_SANDBOXES
        for container in [*spec.get("initContainers", []), *spec["containers"]]:
            admitted = with_limit_range_defaults(container, limit_range)
            for key in hard:
                side, _, resource = key.partition(".")
                if side not in ("requests", "limits") or resource == "storage":
                    continue
                value = admitted[side].get(resource)
                assert value is not None, f"the {kind} pod's {container['name']} names no {key}"
                assert parse_quantity(value) <= parse_quantity(
                    container_limits["max"].get(resource, value)
                ), f"the {kind} pod's {container['name']} asks more {key} than the maximum"
                if kind != "pool":  # a pool pod is one of the sandboxes once claimed
                    totals[key] = totals.get(key, 0) + count * float(parse_quantity(value))
    assert int(hard["pods"]) >= QUOTA_SANDBOXES + QUOTA_JOBS
    library = Settings(server_url="http://onyx.test:8080").library_volume_size
    claims = QUOTA_SANDBOXES * (parse_quantity(library) + parse_quantity("10Gi"))
    assert claims <= parse_quantity(hard["requests.storage"]), "a library and a workspace each"
    assert int(hard["persistentvolumeclaims"]) >= 2 * QUOTA_SANDBOXES
    for key, total in totals.items():
        assert total <= float(parse_quantity(hard[key])), f"{key}: {total} > {hard[key]}"
