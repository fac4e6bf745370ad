"""The real control plane as the cluster tier and the benchmarks see it.

:func:`controlplane_binaries` builds (or finds, cached) Kubernetes' own binaries;
:class:`Cluster` is an admin's client of a running control plane, with the CRDs and
``manifests/base`` applied and the operator's ServiceAccount token at hand.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import time
import urllib.parse
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from craft_operator.devtools.controlplane import ControlPlane
from craft_operator.devtools.local import RESTRICTED

REPO = Path(__file__).resolve().parents[2]
BUILD_SCRIPT = REPO / "hack" / "controlplane" / "build.sh"
OPERATOR_ACCOUNT = ("craft-system", "craft-operator")
CRAFT = "/apis/craft.onyx.app/v1alpha1"
MERGE_PATCH = "application/merge-patch+json"


class BuildError(Exception):
    """The control plane's binaries could not be built; the message says why."""


class ApiError(Exception):
    """The API server refused a request."""

    def __init__(self, status: int, body: dict[str, Any] | None) -> None:
        """Keep the status code and the server's Status object."""
        self.status = status
        self.body = body or {}
        super().__init__(f"{status} {self.body.get('reason', '')}: {self.body.get('message', '')}")

    @property
    def message(self) -> str:
        """The server's message."""
        return str(self.body.get("message", ""))


def controlplane_binaries() -> Path:
    """The directory of the built binaries: ``CRAFT_CONTROLPLANE_BIN``, else build (cached)."""
    given = os.environ.get("CRAFT_CONTROLPLANE_BIN")
    if given:
        return Path(given)
    result = subprocess.run(
        ["bash", str(BUILD_SCRIPT)], capture_output=True, text=True, check=False
    )
    if result.returncode != 0:
        last = (result.stderr.strip().splitlines() or ["no output"])[-1]
        raise BuildError(f"hack/controlplane/build.sh failed: {last}")
    return Path(result.stdout.strip().splitlines()[-1])


def path_of(kind_path: str, namespace: str | None, name: str | None = None) -> str:
    """``/api/v1/namespaces/NS/pods/NAME`` from ``/api/v1/pods``-style paths."""
    base, _, plural = kind_path.rpartition("/")
    path = f"{base}/namespaces/{namespace}/{plural}" if namespace else kind_path
    return f"{path}/{name}" if name else path


#: How long after kube-apiserver is ready again its first moments are counted (see
#: :attr:`Cluster.restarts`).
FIRST_MOMENTS = timedelta(seconds=1)


@dataclass
class Cluster:
    """An admin's client of a running control plane."""

    plane: ControlPlane
    #: When kube-apiserver was restarted: from its stop to its first moments back. Until its
    #: authorizer has loaded the RBAC objects it refuses what they grant (403), for some
    #: tens of milliseconds: :func:`forbidden_requests` leaves those out.
    restarts: list[tuple[datetime, datetime]] = field(default_factory=list)

    def restart_apiserver(self) -> float:
        """Restart kube-apiserver alone (:meth:`ControlPlane.restart_apiserver`), recorded
        in :attr:`restarts`; the seconds from its stop to its being ready again."""
        stopped = datetime.now(UTC)
        self.plane.restart_apiserver()
        ready = datetime.now(UTC)
        self.restarts.append((stopped, ready + FIRST_MOMENTS))
        return (ready - stopped).total_seconds()

    def call(
        self,
        method: str,
        path: str,
        body: dict[str, Any] | None = None,
        *,
        content_type: str = "application/json",
    ) -> dict[str, Any]:
        """One request; the answer, or :class:`ApiError`.

        A 429 is waited out (its ``Retry-After``, up to 10 times), as client-go does: the
        API server answers 429 "storage is (re)initializing" while the watch cache of a
        resource is built, e.g. right after its CRD is established.
        """
        for _ in range(10):
            status, answer = self.plane.request(method, path, body, content_type=content_type)
            if status != 429:
                break
            time.sleep(float(((answer or {}).get("details") or {}).get("retryAfterSeconds", 1)))
        if status >= 300:
            raise ApiError(status, answer)
        return answer or {}

    def get(self, kind_path: str, namespace: str | None, name: str) -> dict[str, Any] | None:
        """The object, or None where there is none."""
        try:
            return self.call("GET", path_of(kind_path, namespace, name))
        except ApiError as error:
            if error.status == 404:
                return None
            raise

    def list(
        self, kind_path: str, namespace: str | None = None, *, selector: str = ""
    ) -> list[dict[str, Any]]:
        """Every object of a kind (in a namespace), optionally by label selector."""
        query = f"?labelSelector={urllib.parse.quote(selector)}" if selector else ""
        items = self.call("GET", path_of(kind_path, namespace) + query).get("items", [])
        return list(items)

    def create(
        self, kind_path: str, namespace: str | None, body: dict[str, Any], *, dry_run: bool = False
    ) -> dict[str, Any]:
        """Create ``body``; with ``dry_run`` the server admits it without storing it."""
        query = "?dryRun=All" if dry_run else ""
        return self.call("POST", path_of(kind_path, namespace) + query, body)

    def patch(
        self, kind_path: str, namespace: str | None, name: str, body: dict[str, Any]
    ) -> dict[str, Any]:
        """A JSON merge patch."""
        return self.call(
            "PATCH", path_of(kind_path, namespace, name), body, content_type=MERGE_PATCH
        )

    def delete(self, kind_path: str, namespace: str | None, name: str) -> None:
        """Delete (background propagation, as kubectl does); fine where it is gone already."""
        try:
            self.call("DELETE", path_of(kind_path, namespace, name))
        except ApiError as error:
            if error.status != 404:
                raise

    def kubectl(self, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        """The built kubectl as admin; fails the caller's test unless it succeeds."""
        result = self.plane.kubectl(*args, stdin=stdin)
        if result.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed:\n{result.stderr}")
        return result

    # -- set-up ---------------------------------------------------------------------------

    def install(self) -> None:
        """The CRDs from ``crds/``, then ``manifests/base`` (namespace, RBAC, operator)."""
        self.kubectl("apply", "--server-side", "-k", str(REPO / "crds"))
        self.kubectl("wait", "--for=condition=Established", "--timeout=60s", "crd", "--all")
        self.kubectl("apply", "--server-side", "-k", str(REPO / "manifests" / "base"))

    def restricted_namespace(self, name: str) -> str:
        """A new, empty namespace with Pod Security ``restricted`` enforced."""
        self.create(
            "/api/v1/namespaces",
            None,
            {
                "apiVersion": "v1",
                "kind": "Namespace",
                "metadata": {"name": name, "labels": dict(RESTRICTED)},
            },
        )
        return name

    def sandbox_namespace(self, name: str) -> str:
        """A namespace like a platform engineer makes one for sandboxes: Pod Security
        ``restricted`` enforced, and ``manifests/sandbox-namespace`` applied in it (the
        operator's Role there, and the sandbox and library-sync NetworkPolicies)."""
        self.restricted_namespace(name)
        self.kubectl("apply", "-n", name, "-k", str(REPO / "manifests" / "sandbox-namespace"))
        # Pods are refused until the namespace's default ServiceAccount exists.
        wait_for(
            lambda: self.get("/api/v1/serviceaccounts", name, "default"),
            what=f"the default ServiceAccount of {name}",
        )
        return name

    def service_account_kubeconfig(
        self, path: Path, account: tuple[str, str] = OPERATOR_ACCOUNT, hours: int = 12
    ) -> Path:
        """A kubeconfig with a TokenRequest token of ``account`` (namespace, name)."""
        namespace, name = account
        token = self.kubectl(
            "create", "token", name, "-n", namespace, f"--duration={hours}h"
        ).stdout.strip()
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "craft-local",
                    "cluster": {
                        "server": self.plane.server,
                        "certificate-authority": str(self.plane.pki.ca_cert),
                    },
                }
            ],
            "users": [{"name": name, "user": {"token": token}}],
            "contexts": [{"name": name, "context": {"cluster": "craft-local", "user": name}}],
            "current-context": name,
        }
        path.write_text(json.dumps(config))
        path.chmod(0o600)
        return path

    # -- reading what the operator did ------------------------------------------------------

    def sandbox(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The CraftSandbox."""
        return self.get(f"{CRAFT}/craftsandboxes", namespace, name)

    def condition(self, namespace: str, name: str, kind: str) -> dict[str, Any]:
        """One condition of the sandbox's status (empty if it has none yet)."""
        sandbox = self.sandbox(namespace, name) or {}
        for condition in (sandbox.get("status") or {}).get("conditions") or []:
            if condition.get("type") == kind:
                return dict(condition)
        return {}

    def events(self, namespace: str, name: str) -> list[dict[str, Any]]:
        """Events about the object named ``name`` in ``namespace``."""
        return [
            event
            for event in self.list("/api/v1/events", namespace)
            if event.get("involvedObject", {}).get("name") == name
        ]

    def reasons_once_said(
        self, namespace: str, name: str, reason: str, *, within: float = 30.0
    ) -> list[str]:
        """The reasons of the events about ``name``, once one of them is ``reason``: the
        operator posts events in the background, after the status they go with."""

        def said() -> list[str] | None:
            reasons = [str(event.get("reason")) for event in self.events(namespace, name)]
            return reasons if reason in reasons else None

        found: list[str] = wait_for(said, within=within, what=f"a {reason} event about {name}")
        return found


OPERATOR_USER = f"system:serviceaccount:{OPERATOR_ACCOUNT[0]}:{OPERATOR_ACCOUNT[1]}"


def audited_requests(plane: ControlPlane, user: str = OPERATOR_USER) -> list[dict[str, Any]]:
    """The audit events of ``user``'s completed requests (see ``ControlPlane.audit_log``)."""
    if not plane.audit_log.exists():
        return []
    events = []
    text = plane.audit_log.read_text()
    # The API server may be writing the last line right now: only whole lines are read.
    for line in text[: text.rfind("\n") + 1].splitlines():
        if user not in line:  # most lines are other users': no need to decode them
            continue
        event = json.loads(line)
        if event.get("user", {}).get("username") == user:
            events.append(event)
    return events


def forbidden_requests(
    plane: ControlPlane,
    namespace: str,
    user: str = OPERATOR_USER,
    *,
    restarts: Iterable[tuple[datetime, datetime]] = (),
) -> list[str]:
    """``user``'s requests in ``namespace`` (or cluster-scoped) that the authorizer refused,
    but those received during ``restarts`` (see :attr:`Cluster.restarts`)."""
    windows = list(restarts)
    refused = []
    for event in audited_requests(plane, user):
        where = event.get("objectRef", {}).get("namespace")
        decision = event.get("annotations", {}).get("authorization.k8s.io/decision")
        if decision != "forbid" or where not in (None, namespace):
            continue
        received = datetime.fromisoformat(event["requestReceivedTimestamp"])
        if not any(start <= received <= end for start, end in windows):
            refused.append(f"{event['verb']} {event['requestURI']}")
    return refused


def wait_for(
    check: Callable[[], Any],
    *,
    within: float = 60.0,
    interval: float = 0.2,
    what: str | Callable[[], str] = "",
) -> Any:
    """Poll ``check`` until it returns something truthy (returned); fail after ``within`` s.

    ``what`` names what is awaited; a callable is asked at the failure, so that it can
    describe the state then (an operator's log, a status).
    """
    deadline = time.monotonic() + within
    last: object = None
    while True:
        try:
            last = check()
        except AssertionError as error:
            last = error
        else:
            if last:
                return last
        if time.monotonic() > deadline:
            described = what() if callable(what) else what
            raise AssertionError(
                f"timed out after {within:.0f} s waiting for {described}: {last!r}"
            )
        time.sleep(interval)


def names(objects: Iterable[dict[str, Any]]) -> list[str]:
    """The sorted names of ``objects``."""
    return sorted(obj["metadata"]["name"] for obj in objects)


@contextlib.contextmanager
def platform_allowing(cluster: Cluster, **spec: Any) -> Iterator[None]:
    """The CraftSandboxPolicy ``default`` with ``spec`` (camelCase), for the block; deleted
    after it (the policy is cluster-wide: no other test must see it)."""
    body = {
        "apiVersion": "craft.onyx.app/v1alpha1",
        "kind": "CraftSandboxPolicy",
        "metadata": {"name": "default"},
        "spec": spec,
    }
    cluster.create(f"{CRAFT}/craftsandboxpolicies", None, body)
    try:
        yield
    finally:
        cluster.delete(f"{CRAFT}/craftsandboxpolicies", None, "default")
