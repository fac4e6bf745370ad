"""``make run``: the operator on the current kube context, or on a local control plane.

With a kube context (``$KUBECONFIG`` or ``~/.kube/config`` naming a current context) it
applies the CRD there and runs the operator, as before. Without one (a fresh laptop, CI)
it starts the local control plane of :mod:`craft_operator.devtools.controlplane`, the
stand-in Onyx API on the operator's database, applies the CRDs and
``manifests/examples/minimal.yaml`` in namespace ``craft-sandboxes``, and runs the operator
against them in the foreground, so that ``kubectl get csb -A -w`` shows a sandbox going to
Ready with no cluster at all.

    python -m craft_operator.devtools.local --state .controlplane \
        --build-script hack/controlplane/build.sh
"""

from __future__ import annotations

import argparse
import os
import shlex
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path

import yaml

from craft_operator.devtools import processes
from craft_operator.devtools.controlplane import (
    ControlPlane,
    ControlPlaneError,
    Ports,
    default_onyx_cli,
    load,
)

SANDBOX_NAMESPACE = "craft-sandboxes"
#: Every CRD of ``crds/``.
CRD_NAMES = (
    "crd/craftsandboxes.craft.onyx.app",
    "crd/craftsandboxpools.craft.onyx.app",
    "crd/craftsandboxpolicies.craft.onyx.app",
    "crd/clusterkopfpeerings.kopf.dev",
)
ONYX_API_PORT = 18080
#: The name ``make run`` records its own process under before it becomes the operator.
OPERATOR = "operator"
#: Seconds the stand-in Onyx API has to answer once started.
ONYX_API_TIMEOUT_S = 30.0
#: Requests to the local Onyx API go straight to it, whatever proxy the environment names.
_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))
RESTRICTED = {
    "pod-security.kubernetes.io/enforce": "restricted",
    "pod-security.kubernetes.io/enforce-version": "latest",
}


def current_context(environ: dict[str, str] | None = None) -> str | None:
    """The current context named by ``$KUBECONFIG`` (its files) or ``~/.kube/config``."""
    environ = dict(os.environ) if environ is None else environ
    if environ.get("KUBERNETES_SERVICE_HOST"):
        return "in-cluster"
    configured = environ.get("KUBECONFIG")
    paths = (
        [Path(p) for p in configured.split(os.pathsep) if p]
        if configured
        else [Path(environ.get("HOME", str(Path.home()))) / ".kube" / "config"]
    )
    for path in paths:
        try:
            document = yaml.safe_load(path.read_text())
        except (OSError, yaml.YAMLError):
            continue
        if isinstance(document, dict) and document.get("current-context"):
            return str(document["current-context"])
    return None


def names_local_plane(state: Path, environ: dict[str, str] | None = None) -> bool:
    """Whether ``$KUBECONFIG`` names the local control plane's own kubeconfig in ``state``
    (as the README has a second terminal export it): ``make run`` from there restarts the
    local run, not a run on that context with another database and no Onyx server."""
    environ = dict(os.environ) if environ is None else environ
    ours = (state / "admin.kubeconfig").resolve()
    configured = environ.get("KUBECONFIG") or ""
    return any(Path(p).resolve() == ours for p in configured.split(os.pathsep) if p)


def operator_command() -> list[str]:
    """``craft-operator`` from this environment."""
    return [str(Path(sys.executable).parent / "craft-operator")]


def context_commands(repo: Path) -> list[list[str]]:
    """The kubectl commands ``make run`` runs on a kube context before the operator: every
    CRD of ``crds/`` (the operator lists sandboxes, pools and policies before it acts; one
    missing holds it back), established."""
    return [
        ["kubectl", "apply", "--server-side", "-k", str(repo / "crds")],
        ["kubectl", "wait", "--for=condition=Established", "--timeout=60s", *CRD_NAMES],
    ]


def run_on_context(context: str, repo: Path) -> int:
    """Apply the CRDs on the current context and run the operator there (foreground)."""
    print(f"make run: kube context {context!r}; applying the CRDs and running the operator")
    for command in context_commands(repo):
        subprocess.run(command, check=True)  # noqa: S603
    os.execv(operator_command()[0], [*operator_command(), "run", "--standalone"])  # noqa: S606
    return 0  # not reached


def build_binaries(script: Path) -> Path:
    """The control plane's binaries, built by ``script`` if not cached."""
    result = subprocess.run(  # noqa: S603
        [str(script)], stdout=subprocess.PIPE, text=True, check=False
    )
    if result.returncode != 0:
        raise ControlPlaneError(f"{script} failed (see above)")
    return Path(result.stdout.strip().splitlines()[-1])


def start_onyx_api(plane: ControlPlane, database_url: str) -> str:
    """The stand-in Onyx API on the operator's database, stopped with the control plane."""
    url = f"http://127.0.0.1:{ONYX_API_PORT}"
    if not _onyx_api_running(plane.state):
        refuse_a_taken_onyx_api_port(plane.state)
        processes.start(
            plane.state,
            "onyx-api",
            [
                sys.executable,
                "-m",
                "craft_operator.devtools.onyx_api",
                "--port",
                str(ONYX_API_PORT),
                "--database-url",
                database_url,
            ],
        )
    _wait_for_onyx_api(plane.state, url)
    return url


def _onyx_api_running(state: Path) -> bool:
    return any(p.name == "onyx-api" and processes.is_running(p) for p in processes.recorded(state))


def refuse_a_running_operator(state: Path) -> None:
    """Raise :class:`ControlPlaneError` while the operator an earlier ``make run`` on this
    state started still runs: a second one would reconcile the same sandboxes with the same
    database beside it (standalone, neither knows of the other)."""
    running = [p for p in processes.recorded_selves(state) if p.name == OPERATOR]
    for process in running:
        if processes.is_running(process):
            raise ControlPlaneError(
                f"the operator of another make run is running (pid {process.pid}): stop it "
                "(Ctrl-C in its terminal) and run make run again; kubectl and craft-operator "
                "need only the export line it printed"
            )


def refuse_a_taken_onyx_api_port(state: Path) -> None:
    """Raise :class:`ControlPlaneError` if another program answers on the stand-in Onyx
    API's port: ours would die on bind, and the operator would validate PATs against that
    one (another make run's, with its own database)."""
    if not _onyx_api_running(state) and _answers(ONYX_API_PORT):
        raise ControlPlaneError(
            f"port {ONYX_API_PORT}, the stand-in Onyx API's, is taken by another program "
            "(another make run?): stop it and run make run again"
        )


def _answers(port: int) -> bool:
    """Whether something accepts connections on ``port`` of this machine."""
    with socket.socket() as probe:
        probe.settimeout(1)
        return probe.connect_ex(("127.0.0.1", port)) == 0


def _wait_for_onyx_api(state: Path, url: str, timeout: float = ONYX_API_TIMEOUT_S) -> None:
    """Return once the stand-in Onyx API that ``state`` records answers at ``url``; raise
    :class:`ControlPlaneError` naming its log if it exits (its port taken, say) or does not
    answer in time: the operator would otherwise validate PATs against whatever holds the
    port."""
    log = state / "logs" / "onyx-api.log"
    deadline = time.monotonic() + timeout
    while True:
        if not _onyx_api_running(state):
            raise ControlPlaneError(f"the stand-in Onyx API exited; see {log}")
        try:
            with _DIRECT.open(f"{url}/api/version", timeout=2):
                return
        except (OSError, urllib.error.URLError):
            if time.monotonic() > deadline:
                raise ControlPlaneError(
                    f"the stand-in Onyx API does not answer at {url} after {timeout:g} s; see {log}"
                ) from None
            time.sleep(0.2)


def apply_example(plane: ControlPlane, repo: Path) -> None:
    """The CRDs, the sandbox namespace (restricted, ``manifests/sandbox-namespace``) and
    ``minimal.yaml`` in it."""
    for args in (
        ("apply", "--server-side", "-k", str(repo / "crds")),
        ("wait", "--for=condition=Established", "--timeout=60s", "crd", "--all"),
    ):
        checked(plane, *args)
    labels = ",".join(f"{key}={value}" for key, value in RESTRICTED.items())
    if plane.get_json(f"/api/v1/namespaces/{SANDBOX_NAMESPACE}") is None:
        checked(plane, "create", "namespace", SANDBOX_NAMESPACE)
        checked(plane, "label", "namespace", SANDBOX_NAMESPACE, *labels.split(","))
    deadline = time.monotonic() + 30
    while plane.get_json(f"/api/v1/namespaces/{SANDBOX_NAMESPACE}/serviceaccounts/default") is None:
        if time.monotonic() > deadline:
            raise ControlPlaneError(f"namespace {SANDBOX_NAMESPACE} got no default ServiceAccount")
        time.sleep(0.2)
    # Its NetworkPolicies: without one restricting their egress no sandbox pod starts.
    sandbox_namespace = repo / "manifests" / "sandbox-namespace"
    checked(plane, "apply", "-n", SANDBOX_NAMESPACE, "-k", str(sandbox_namespace))
    example = repo / "manifests" / "examples" / "minimal.yaml"
    checked(plane, "apply", "-n", SANDBOX_NAMESPACE, "-f", str(example))


def checked(plane: ControlPlane, *args: str) -> None:
    """kubectl against the control plane; a failure stops ``make run`` with its message."""
    result = plane.kubectl(*args)
    if result.returncode != 0:
        raise ControlPlaneError(f"kubectl {' '.join(args)}: {result.stderr.strip()}")


def run_locally(state: Path, build_script: Path, repo: Path) -> int:
    """Start the local control plane, the Onyx API and the example; run the operator."""
    previous = load(state)
    refuse_a_running_operator(state)  # before anything starts
    refuse_a_taken_onyx_api_port(state)
    reused = previous.running()
    ports = previous.ports if reused else Ports()
    plane = ControlPlane(state, build_binaries(build_script), ports, default_onyx_cli())
    plane.up()
    operator_state = state / "operator"
    operator_state.mkdir(parents=True, exist_ok=True)
    database_url = f"sqlite:///{operator_state / 'craft-operator.db'}"
    onyx_api = start_onyx_api(plane, database_url)
    apply_example(plane, repo)
    environment = operator_environment(plane, operator_state, database_url, onyx_api)
    print(announcement(plane, onyx_api, environment, reused=reused), flush=True)
    processes.record_self(state, OPERATOR)  # the pid and start time survive the exec
    os.execve(  # noqa: S606
        operator_command()[0],
        [*operator_command(), "run", "--standalone"],
        {**os.environ, **environment},
    )
    return 0  # not reached


def operator_environment(
    plane: ControlPlane, operator_state: Path, database_url: str, onyx_api: str
) -> dict[str, str]:
    """What the operator runs with on the local control plane, beyond this environment:
    the plane's kubeconfig, its own state directory and database, and the stand-in Onyx
    API as its server (unless ``CRAFT_SERVER_URL`` names another)."""
    return {
        "KUBECONFIG": str(plane.kubeconfig),
        "CRAFT_STATE_DIR": str(operator_state),
        "CRAFT_DATABASE_URL": database_url,
        "CRAFT_SERVER_URL": os.environ.get("CRAFT_SERVER_URL", onyx_api),
    }


def announcement(
    plane: ControlPlane, onyx_api: str, environment: Mapping[str, str], *, reused: bool = False
) -> str:
    """What ``make run`` says once the local run is up: what it started (or, ``reused``,
    that the control plane was already running), and the export
    line for another terminal, where kubectl and ``craft-operator`` (``doctor``,
    ``credentials show``) then see this control plane and the operator's database, not
    ``~/.local/state/craft-operator``'s."""
    exports = " ".join(f"{name}={shlex.quote(value)}" for name, value in environment.items())
    plane_said = (
        f"reusing the local control plane ({plane.server}) already running, with"
        if reused
        else f"started a local control plane ({plane.server}),"
    )
    return (
        f"make run: no kube context, so {plane_said} the "
        f"stand-in Onyx API ({onyx_api}) and sandbox {SANDBOX_NAMESPACE}/alice; Ctrl-C "
        "stops the operator, `make controlplane-down` the rest. In another terminal, for "
        "kubectl and craft-operator (doctor, credentials show):\n"
        f"  export {exports}\n"
        f"  {plane.binary('kubectl')} get csb -A -w\n"
        f"  {operator_command()[0]} credentials show {SANDBOX_NAMESPACE}/alice"
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``make run``."""
    parser = argparse.ArgumentParser(prog="python -m craft_operator.devtools.local")
    parser.add_argument("--state", type=Path, required=True, help="the control plane's state")
    parser.add_argument("--build-script", type=Path, required=True)
    args = parser.parse_args(argv)
    repo = args.build_script.resolve().parents[2]
    state = args.state.resolve()
    context = current_context()
    if context is not None and not names_local_plane(state):
        return run_on_context(context, repo)
    try:
        return run_locally(state, args.build_script.resolve(), repo)
    except (ControlPlaneError, OSError) as error:
        # OSError: a state directory that cannot be made or written, say.
        print(f"make run: {error}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
