"""What each process of the local control plane is started with: its command line and the
files it reads (kubeconfig, audit policy, the simulated image's programs), and the
simulated node.

Pure where it can be: :mod:`craft_operator.devtools.controlplane` decides when to start
what and passes the paths and ports in.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path
from typing import Any

from craft_operator.devtools.pki import PkiFiles

DAEMONS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok", "podexec")
BINARIES = (
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kwok",
    "podexec",
    "kubectl",
)
NODE_NAME = "kwok-node"
#: The sandbox image's onyx-cli wrapper, from this checkout (the dev tools run from one).
ONYX_CLI_WRAPPER = Path(__file__).resolve().parents[3] / "sandbox-image" / "onyx-cli"
#: Requests by the service accounts of these namespaces are audited (the operator's).
AUDITED_NAMESPACES = ("craft-system",)
SERVICE_CIDR = "10.96.0.0/16"
#: The controllers this project relies on (garbage collection above all); the others are
#: left out because they have nothing to act on here and only cost CPU.
CONTROLLERS = tuple(
    f"{name}-controller"
    for name in (
        "garbage-collector",
        "job",
        "namespace",
        "serviceaccount",
        "serviceaccount-token",
        "ttl-after-finished",
        "replicaset",
        "deployment",
        "statefulset",
        "disruption",
        "root-ca-certificate-publisher",
        "pod-garbage-collector",
        "node-lifecycle",
        "clusterrole-aggregation",
        "persistentvolume-binder",
        "persistentvolume-protection",
        "persistentvolumeclaim-protection",
        "validatingadmissionpolicy-status",
        "horizontal-pod-autoscaler",  # idle but for a pool test: a pool's scale target
    )
)


#: The programs the simulated sandbox image has from BusyBox (the image promises sh and tar;
#: the library scripts use the rest).
IMAGE_APPLETS = (
    "sh", "tar", "cat", "mv", "rm", "mkdir", "rmdir", "dirname", "ls", "sleep", "env", "echo",
    "test", "[", "printf", "find", "wc", "head", "sort", "stat", "touch", "id", "true", "false",
)  # fmt: skip


def build_node(kubelet_port: int) -> dict[str, Any]:
    """The simulated node: its kubelet endpoint is podexec on 127.0.0.1:``kubelet_port``.

    Room for 10,000 sandbox pods (the load benchmark). kwok gives it its addresses (the API
    server is told to dial InternalIP, 127.0.0.1). It declares no features, so the API
    server speaks SPDY to podexec (ExtendWebSocketsToKubelet needs a websocket kubelet).
    """
    capacity = {"cpu": "20k", "memory": "80Ti", "ephemeral-storage": "400Ti", "pods": "20000"}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": NODE_NAME,
            "labels": {
                "kubernetes.io/hostname": NODE_NAME,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "type": "kwok",
            },
            "annotations": {"node.alpha.kubernetes.io/ttl": "0"},
        },
        "status": {
            "daemonEndpoints": {"kubeletEndpoint": {"Port": kubelet_port}},
            "capacity": capacity,
            "allocatable": capacity,
        },
    }


def kubeconfig(server: str, ca_cert: Path, token: str) -> dict[str, Any]:
    """An admin kubeconfig for ``server``, trusting ``ca_cert``, with the bearer ``token``."""
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "craft-local",
                "cluster": {"server": server, "certificate-authority": str(ca_cert)},
            }
        ],
        "users": [{"name": "admin", "user": {"token": token}}],
        "contexts": [
            {"name": "craft-local", "context": {"cluster": "craft-local", "user": "admin"}}
        ],
        "current-context": "craft-local",
    }


def etcd_args(data: Path, client_port: int, peer_port: int) -> list[str]:
    """etcd's flags: one member, data in ``data``, no fsync (nothing here must survive)."""
    peer = f"http://127.0.0.1:{peer_port}"
    client = f"http://127.0.0.1:{client_port}"
    return [
        f"--data-dir={data}",
        "--name=craft-local",
        f"--listen-client-urls={client}",
        f"--advertise-client-urls={client}",
        f"--listen-peer-urls={peer}",
        f"--initial-advertise-peer-urls={peer}",
        f"--initial-cluster=craft-local={peer}",
        "--unsafe-no-fsync=true",
        "--quota-backend-bytes=8589934592",
        "--log-level=warn",
    ]


def audit_policy() -> str:
    """The audit policy: metadata of the requests of ``AUDITED_NAMESPACES``' accounts only."""
    groups = ", ".join(f'"system:serviceaccounts:{ns}"' for ns in AUDITED_NAMESPACES)
    return (
        "apiVersion: audit.k8s.io/v1\n"
        "kind: Policy\n"
        "omitStages: [RequestReceived, ResponseStarted]\n"
        "rules:\n"
        f"  - level: Metadata\n    userGroups: [{groups}]\n"
        "  - level: None\n"
    )


def apiserver_args(
    pki: PkiFiles, etcd_port: int, secure_port: int, audit_policy_file: Path, audit_log: Path
) -> list[str]:
    """kube-apiserver's flags: on loopback, RBAC, the audit log, podexec as the kubelet."""
    return [
        f"--etcd-servers=http://127.0.0.1:{etcd_port}",
        "--bind-address=127.0.0.1",
        "--advertise-address=127.0.0.1",
        # The kubernetes Service cannot point at loopback; nothing here needs it.
        "--endpoint-reconciler-type=none",
        f"--secure-port={secure_port}",
        f"--tls-cert-file={pki.serving_cert}",
        f"--tls-private-key-file={pki.serving_key}",
        f"--client-ca-file={pki.ca_cert}",
        f"--token-auth-file={pki.token_file}",
        f"--service-account-key-file={pki.service_account_public_key}",
        f"--service-account-signing-key-file={pki.service_account_key}",
        "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
        f"--service-cluster-ip-range={SERVICE_CIDR}",
        "--authorization-mode=RBAC",
        # As OpenShift does: setting blockOwnerDeletion needs update on the owner's
        # finalizers, so RBAC that misses it fails here and not first in production.
        "--enable-admission-plugins=OwnerReferencesPermissionEnforcement",
        f"--audit-policy-file={audit_policy_file}",
        f"--audit-log-path={audit_log}",
        "--audit-log-format=json",
        "--audit-log-mode=blocking",
        "--audit-log-maxsize=0",
        "--kubelet-preferred-address-types=InternalIP",
        f"--kubelet-certificate-authority={pki.ca_cert}",
        f"--kubelet-client-certificate={pki.kubelet_client_cert}",
        f"--kubelet-client-key={pki.kubelet_client_key}",
        "--allow-privileged=false",
        "--profiling=false",
        "--v=1",
    ]


def controller_manager_args(kubeconfig_file: Path, pki: PkiFiles, secure_port: int) -> list[str]:
    """kube-controller-manager's flags: only ``CONTROLLERS``, no leader election."""
    return [
        f"--kubeconfig={kubeconfig_file}",
        f"--controllers={','.join(CONTROLLERS)}",
        f"--service-account-private-key-file={pki.service_account_key}",
        f"--root-ca-file={pki.ca_cert}",
        "--leader-elect=false",
        "--bind-address=127.0.0.1",
        f"--secure-port={secure_port}",
        "--concurrent-gc-syncs=5",
        "--profiling=false",
    ]


def scheduler_args(kubeconfig_file: Path, secure_port: int) -> list[str]:
    """kube-scheduler's flags: no leader election, on loopback."""
    return [
        f"--kubeconfig={kubeconfig_file}",
        "--leader-elect=false",
        "--bind-address=127.0.0.1",
        f"--secure-port={secure_port}",
        "--profiling=false",
    ]


def kwok_args(kubeconfig_file: Path, config: Path) -> list[str]:
    """kwok's flags: it manages the one simulated node, ``NODE_NAME``."""
    # No --node-port and no --server-address: kwok serves nothing itself and leaves the
    # node's kubelet port alone, which points at podexec.
    return [
        f"--kubeconfig={kubeconfig_file}",
        f"--config={config}",
        "--manage-all-nodes=true",
        "--node-ip=127.0.0.1",
        f"--node-name={NODE_NAME}",
        "--cidr=10.0.0.0/16",
    ]


def podexec_args(
    kubeconfig_file: Path,
    pki: PkiFiles,
    port: int,
    *,
    pods_dir: Path,
    volumes_dir: Path,
    image_bin: Path,
) -> list[str]:
    """podexec's arguments: the simulated kubelet's exec endpoint on 127.0.0.1:``port``."""
    return [
        "serve",
        f"--address=127.0.0.1:{port}",
        f"--kubeconfig={kubeconfig_file}",
        f"--tls-cert-file={pki.kubelet_cert}",
        f"--tls-private-key-file={pki.kubelet_key}",
        f"--client-ca-file={pki.ca_cert}",
        f"--pods-dir={pods_dir}",
        f"--volumes-dir={volumes_dir}",
        f"--image-bin={image_bin}",
    ]


def prepare_image(image_bin: Path, onyx_cli: Path | None) -> Path:
    """The simulated sandbox image's programs in ``image_bin``: BusyBox's applets and
    onyx-cli behind the image's wrapper (``sandbox-image/onyx-cli``).

    Copied, not linked, where the original sits in a directory the pod's user may not
    enter (a virtualenv under /root).
    """
    if image_bin.exists():
        shutil.rmtree(image_bin)
    image_bin.mkdir(parents=True)
    busybox = shutil.which("busybox")
    if busybox:
        for applet in IMAGE_APPLETS:
            (image_bin / applet).symlink_to(busybox)
    else:
        print(
            "controlplane: busybox is not installed, so the simulated sandbox image runs "
            "this machine's sh and tar instead (apt-get install busybox)",
            file=sys.stderr,
        )
    if onyx_cli is not None:
        # As in the sandbox image: the pinned onyx-cli behind the wrapper that reads the
        # PAT the operator delivers into the pod.
        shutil.copy2(onyx_cli, image_bin / "onyx-cli.real")
        shutil.copy2(ONYX_CLI_WRAPPER, image_bin / "onyx-cli")
    for path in (image_bin.parent, image_bin):
        path.chmod(0o755)
    return image_bin
