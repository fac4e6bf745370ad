"""A real Kubernetes control plane on this machine, for development and the cluster tests.

Kubernetes' own binaries, built from its Go modules by ``hack/controlplane/build.sh``:
etcd, kube-apiserver, kube-controller-manager, kube-scheduler, and kwok as the kubelet of
one simulated node. Pods go Running and Ready under kwok, Job pods complete, and
``pods/exec`` runs the command on this machine through ``podexec``: in a mount
namespace of its own where the pod's directory is ``/workspace``, with the pod's
environment (Secret and ConfigMap references resolved).

    python -m craft_operator.devtools.controlplane up --bin-dir DIR --state DIR
    python -m craft_operator.devtools.controlplane down --state DIR

``up`` starts every process in the background, waits until the cluster serves (API ready,
node Ready, service accounts being created) and prints ``KUBECONFIG=<path>`` last; ``down``
stops every process it started, by pid. What each process is started with (its flags, its
files, the simulated node) is :mod:`craft_operator.devtools.daemons`.
"""

from __future__ import annotations

import argparse
import json
import shutil
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from craft_operator.devtools import daemons, processes
from craft_operator.devtools.daemons import BINARIES, DAEMONS, NODE_NAME, build_node
from craft_operator.devtools.pki import PkiFiles, ensure_pki


class ControlPlaneError(Exception):
    """The control plane cannot be built, started or reached; the message says why."""


@dataclass(frozen=True)
class Ports:
    """The TCP ports on 127.0.0.1 the control plane listens on."""

    apiserver: int = 16443
    etcd_client: int = 12379
    etcd_peer: int = 12380
    kubelet: int = 20250
    controller_manager: int = 20257
    scheduler: int = 20259

    @classmethod
    def free(cls) -> Ports:
        """Ports nobody listens on right now (for tests that run beside a developer's)."""
        sockets = [socket.socket() for _ in range(6)]
        try:
            for sock in sockets:
                sock.bind(("127.0.0.1", 0))
            numbers = [int(sock.getsockname()[1]) for sock in sockets]
        finally:
            for sock in sockets:
                sock.close()
        return cls(*numbers)


@dataclass(frozen=True)
class ControlPlane:
    """A control plane described by its state directory, binaries and ports."""

    state: Path
    bin_dir: Path
    ports: Ports
    #: The sandbox image's ``onyx-cli`` (PyPI's onyx-cli wheel carries the binary).
    onyx_cli: Path | None = None

    @property
    def pki(self) -> PkiFiles:
        """The key material (CA, serving certificate, service-account keys, admin token)."""
        return PkiFiles(self.state / "pki")

    @property
    def kubeconfig(self) -> Path:
        """An admin kubeconfig (group system:masters)."""
        return self.state / "admin.kubeconfig"

    @property
    def server(self) -> str:
        """The API server's URL."""
        return f"https://127.0.0.1:{self.ports.apiserver}"

    @property
    def audit_log(self) -> Path:
        """The API server's audit log: every request of a service account in
        ``daemons.AUDITED_NAMESPACES`` (the operator's), one JSON line each, once complete."""
        return self.state / "audit.log"

    @property
    def pods_dir(self) -> Path:
        """Where each simulated pod's ``/workspace`` lives on this machine."""
        return self.state / "pods"

    def binary(self, name: str) -> str:
        """The absolute path of one of the built binaries."""
        return str(self.bin_dir / name)

    def admin_token(self) -> str:
        """The admin bearer token."""
        return self.pki.admin_token.read_text().strip()

    def ssl_context(self) -> ssl.SSLContext:
        """A TLS context that trusts the control plane's CA."""
        return ssl.create_default_context(cafile=str(self.pki.ca_cert))

    # -- lifecycle ----------------------------------------------------------------------

    def up(self, timeout: float = 60.0) -> None:
        """Start every process unless it runs already, and wait until the cluster serves."""
        missing = [name for name in BINARIES if not (self.bin_dir / name).is_file()]
        if missing:
            raise ControlPlaneError(
                f"missing binaries in {self.bin_dir}: {', '.join(missing)} "
                "(build them with hack/controlplane/build.sh)"
            )
        if self.running():
            self.wait_until_serving(timeout)
            return
        self.down()
        self.state.mkdir(parents=True, exist_ok=True)
        (self.state / "ports.json").write_text(json.dumps(asdict(self.ports)))
        ensure_pki(self.pki.directory)
        self._write_kubeconfig()
        self._start_etcd()
        self._start_apiserver()
        self._wait_for_api(timeout)
        self._start_controller_manager()
        self._start_scheduler()
        self._start_podexec()
        self._start_kwok()
        self.wait_until_serving(timeout)

    def down(self) -> list[str]:
        """Stop every process this state directory started; the names of those stopped."""
        if not (self.state / "pids").is_dir():
            return []
        # The API server drains its clients' requests before it exits, and waits on etcd:
        # stopped together they take many seconds, in this order about one.
        clients = [name for name in DAEMONS if name not in ("kube-apiserver", "etcd")]
        return processes.stop_all(
            self.state, first=([*clients, "onyx-api"], ["kube-apiserver"], ["etcd"])
        )

    def restart_apiserver(self, timeout: float = 60.0) -> None:
        """Stop kube-apiserver alone and start it again, as a control-plane upgrade does:
        the same flags, port and key material, so the same tokens and certificates are
        accepted. Returns once the API is ready again.

        Everything else runs on: etcd keeps the cluster's state (resource versions too), and
        the API's clients see their connections cut, then refused, until it serves again.
        """
        processes.stop(self.state, ["kube-apiserver"])
        self._start_apiserver()
        self._wait_for_api(timeout)

    def running(self) -> bool:
        """True when every process of this control plane is alive."""
        alive = {p.name for p in processes.recorded(self.state) if processes.is_running(p)}
        return set(DAEMONS) <= alive

    def wait_until_serving(self, timeout: float = 60.0) -> None:
        """Wait until the API is ready, the node Ready and service accounts are created."""
        deadline = time.monotonic() + timeout
        self._wait_for_api(timeout)
        self._ensure_node()
        while True:
            node = self.get_json(f"/api/v1/nodes/{NODE_NAME}")
            ready = any(
                condition.get("type") == "Ready" and condition.get("status") == "True"
                for condition in (node or {}).get("status", {}).get("conditions", [])
            )
            account = self.get_json("/api/v1/namespaces/default/serviceaccounts/default")
            if ready and account:
                return
            if time.monotonic() > deadline:
                what = "node Ready" if not ready else "the default service account"
                raise ControlPlaneError(f"timed out waiting for {what}; logs in {self.logs()}")
            time.sleep(0.2)

    def logs(self) -> Path:
        """The directory of the processes' log files."""
        return self.state / "logs"

    # -- the API ------------------------------------------------------------------------

    def request(
        self,
        method: str,
        path: str,
        body: dict[str, Any] | None = None,
        *,
        content_type: str = "application/json",
    ) -> tuple[int, dict[str, Any] | None]:
        """One request as admin; the status code and the decoded JSON answer, if any."""
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(  # noqa: S310 (https to our own server)
            f"{self.server}{path}", data=data, method=method
        )
        request.add_header("Authorization", f"Bearer {self.admin_token()}")
        request.add_header("Content-Type", content_type)
        try:
            with urllib.request.urlopen(  # noqa: S310
                request, context=self.ssl_context(), timeout=10
            ) as answer:
                text = answer.read()
                status = int(answer.status)
        except urllib.error.HTTPError as error:
            text = error.read()
            status = error.code
        try:
            decoded = json.loads(text) if text else None
        except ValueError:
            decoded = None
        return status, decoded if isinstance(decoded, dict) else None

    def get_json(self, path: str) -> dict[str, Any] | None:
        """GET ``path`` as admin; None unless the answer is 200."""
        try:
            status, body = self.request("GET", path)
        except OSError:
            return None
        return body if status == 200 else None

    def kubectl(self, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        """Run the built kubectl as admin against this control plane."""
        return subprocess.run(  # noqa: S603
            [self.binary("kubectl"), "--kubeconfig", str(self.kubeconfig), *args],
            input=stdin,
            capture_output=True,
            text=True,
            check=False,
        )

    # -- the processes ------------------------------------------------------------------

    def _write_kubeconfig(self) -> None:
        config = daemons.kubeconfig(self.server, self.pki.ca_cert, self.admin_token())
        self.kubeconfig.touch(mode=0o600, exist_ok=True)
        self.kubeconfig.write_text(json.dumps(config, indent=2))

    def _start(self, name: str, *args: str, env: dict[str, str] | None = None) -> None:
        processes.start(self.state, name, [self.binary(name), *args], env=env)

    def _start_etcd(self) -> None:
        ports = self.ports
        self._start(
            "etcd", *daemons.etcd_args(self.state / "etcd", ports.etcd_client, ports.etcd_peer)
        )

    def _start_apiserver(self) -> None:
        policy = self.state / "audit-policy.yaml"
        policy.write_text(daemons.audit_policy())
        args = daemons.apiserver_args(
            self.pki, self.ports.etcd_client, self.ports.apiserver, policy, self.audit_log
        )
        self._start("kube-apiserver", *args)

    def _start_controller_manager(self) -> None:
        args = daemons.controller_manager_args(
            self.kubeconfig, self.pki, self.ports.controller_manager
        )
        self._start("kube-controller-manager", *args)

    def _start_scheduler(self) -> None:
        self._start(
            "kube-scheduler", *daemons.scheduler_args(self.kubeconfig, self.ports.scheduler)
        )

    def _start_kwok(self) -> None:
        stages = subprocess.run(  # noqa: S603
            [self.binary("kwok"), "print-default-stages"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        config = self.state / "kwok.yaml"
        config.write_text(stages)
        self._start("kwok", *daemons.kwok_args(self.kubeconfig, config))

    def _start_podexec(self) -> None:
        image_bin = daemons.prepare_image(self.state / "image" / "bin", self.onyx_cli)
        args = daemons.podexec_args(
            self.kubeconfig,
            self.pki,
            self.ports.kubelet,
            pods_dir=self.pods_dir,
            volumes_dir=self.state / "volumes",
            image_bin=image_bin,
        )
        self._start("podexec", *args)

    def _ensure_node(self) -> None:
        """Register the simulated node (kwok makes it Ready); nothing if it exists."""
        if self.get_json(f"/api/v1/nodes/{NODE_NAME}") is not None:
            return
        status, body = self.request("POST", "/api/v1/nodes", build_node(self.ports.kubelet))
        if status not in (201, 409):
            raise ControlPlaneError(f"could not register node {NODE_NAME}: {status} {body}")

    def _wait_for_api(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                status, _ = self.request("GET", "/readyz")
                if status == 200:
                    return
            except OSError:
                pass
            for process in processes.recorded(self.state):
                if not processes.is_running(process):
                    raise ControlPlaneError(
                        f"{process.name} exited; see {self.logs() / (process.name + '.log')}"
                    )
            if time.monotonic() > deadline:
                raise ControlPlaneError(f"the API server did not become ready; see {self.logs()}")
            time.sleep(0.2)


def default_onyx_cli() -> Path | None:
    """The ``onyx-cli`` installed beside this Python (the test extra pins it), if any."""
    beside = Path(sys.executable).parent / "onyx-cli"
    if beside.is_file():
        return beside
    found = shutil.which("onyx-cli")
    return Path(found) if found else None


def load(state: Path, bin_dir: Path | None = None) -> ControlPlane:
    """The control plane whose state is in ``state`` (its ports as it was started with)."""
    ports_file = state / "ports.json"
    ports = Ports(**json.loads(ports_file.read_text())) if ports_file.exists() else Ports()
    return ControlPlane(state, bin_dir or Path(), ports, default_onyx_cli())


def main(argv: Sequence[str] | None = None) -> int:
    """``up``, ``down`` or ``status`` of the local control plane."""
    parser = argparse.ArgumentParser(
        prog="python -m craft_operator.devtools.controlplane",
        description="A local Kubernetes control plane (etcd, kube-apiserver, "
        "kube-controller-manager, kube-scheduler, kwok) for development and tests.",
    )
    parser.add_argument("action", choices=("up", "down", "status"))
    parser.add_argument("--state", type=Path, required=True, help="state directory")
    parser.add_argument("--bin-dir", type=Path, help="the built binaries (for up)")
    parser.add_argument(
        "--free-ports", action="store_true", help="pick free ports instead of the fixed ones"
    )
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for up")
    args = parser.parse_args(argv)
    state = args.state.resolve()
    try:
        if args.action == "down":
            stopped = load(state).down()
            print(f"stopped: {', '.join(stopped)}" if stopped else "nothing was running")
            return 0
        if args.action == "status":
            plane = load(state)
            alive = {p.name for p in processes.recorded(state) if processes.is_running(p)}
            for name in DAEMONS:
                print(f"{name}: {'running' if name in alive else 'stopped'}")
            return 0 if plane.running() else 1
        if args.bin_dir is None:
            parser.error("up needs --bin-dir")
        previous = load(state)
        ports = (
            previous.ports if previous.running() else (Ports.free() if args.free_ports else Ports())
        )
        plane = ControlPlane(state, args.bin_dir.resolve(), ports, default_onyx_cli())
        plane.up(args.timeout)
    except ControlPlaneError as error:
        print(f"controlplane: {error}", file=sys.stderr)
        return 1
    version = plane.get_json("/version") or {}
    print(
        f"control plane {version.get('gitVersion', '?')} serving at {plane.server} "
        f"(etcd :{plane.ports.etcd_client}, podexec :{plane.ports.kubelet}); logs in {plane.logs()}"
    )
    print(f"KUBECONFIG={plane.kubeconfig}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
