"""``make run`` chooses the current kube context when there is one, else a local cluster."""

from __future__ import annotations

import os
import shlex
import shutil
import socket
import subprocess
from pathlib import Path

import pytest

from craft_operator.devtools import local, processes
from craft_operator.devtools.controlplane import ControlPlane, ControlPlaneError, Ports
from craft_operator.devtools.local import current_context, names_local_plane

BINARIES = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")
BINARIES += ("podexec", "kubectl")
SLEEP = shutil.which("sleep") or "/bin/sleep"
BUILD_SCRIPT = Path(__file__).resolve().parents[3] / "hack" / "controlplane" / "build.sh"


def write_config(path: Path, context: str | None) -> Path:
    lines = ["apiVersion: v1", "kind: Config"]
    if context is not None:
        lines.append(f"current-context: {context}")
    path.write_text("\n".join(lines) + "\n")
    return path


def test_the_default_kubeconfig_names_the_context(tmp_path: Path) -> None:
    write_config((tmp_path / ".kube").mkdir() or tmp_path / ".kube" / "config", "kind-dev")
    assert current_context({"HOME": str(tmp_path)}) == "kind-dev"


def test_no_kubeconfig_means_no_context(tmp_path: Path) -> None:
    assert current_context({"HOME": str(tmp_path)}) is None


def test_a_kubeconfig_without_a_current_context_is_no_context(tmp_path: Path) -> None:
    config = write_config(tmp_path / "config", None)
    assert current_context({"HOME": str(tmp_path), "KUBECONFIG": str(config)}) is None


def test_kubeconfig_lists_files_and_the_first_with_a_context_wins(tmp_path: Path) -> None:
    first = write_config(tmp_path / "a", None)
    second = write_config(tmp_path / "b", "prod")
    value = f"{tmp_path / 'missing'}:{first}:{second}"
    assert current_context({"HOME": str(tmp_path), "KUBECONFIG": value}) == "prod"


def test_an_unreadable_kubeconfig_is_no_context(tmp_path: Path) -> None:
    broken = tmp_path / "config"
    broken.write_text("{not: yaml: at all")
    assert current_context({"HOME": str(tmp_path), "KUBECONFIG": str(broken)}) is None


def test_inside_a_pod_the_in_cluster_config_is_the_context(tmp_path: Path) -> None:
    environ = {"HOME": str(tmp_path), "KUBERNETES_SERVICE_HOST": "10.96.0.1"}
    assert current_context(environ) == "in-cluster"


def test_a_kubeconfig_naming_the_local_planes_own_is_the_local_plane(tmp_path: Path) -> None:
    state = tmp_path / ".controlplane"
    ours = state / "admin.kubeconfig"
    other = tmp_path / "other"
    assert names_local_plane(state, {"KUBECONFIG": str(ours)})
    assert names_local_plane(state, {"KUBECONFIG": f"{other}{os.pathsep}{ours}"})
    assert names_local_plane(
        state, {"KUBECONFIG": str(tmp_path / "x" / ".." / ".controlplane") + "/admin.kubeconfig"}
    )
    assert not names_local_plane(state, {"KUBECONFIG": str(other)})
    assert not names_local_plane(state, {})


def test_make_run_from_the_terminal_the_readme_sets_up_stays_on_the_local_plane(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The README exports the local plane's kubeconfig in a second terminal; `make run`
    # again from there must restart the local run (its database, its Onyx API), not run the
    # operator on that context with another database and no server URL.
    state = tmp_path / ".controlplane"
    state.mkdir()
    write_config(state / "admin.kubeconfig", "craft-local")
    monkeypatch.setenv("KUBECONFIG", str(state / "admin.kubeconfig"))
    chosen: list[str] = []
    monkeypatch.setattr(local, "run_on_context", lambda *_: chosen.append("context") or 0)
    monkeypatch.setattr(local, "run_locally", lambda *_: chosen.append("local") or 0)
    local.main(["--state", str(state), "--build-script", str(BUILD_SCRIPT)])
    monkeypatch.setenv("KUBECONFIG", str(write_config(tmp_path / "kind", "kind-dev")))
    local.main(["--state", str(state), "--build-script", str(BUILD_SCRIPT)])
    assert chosen == ["local", "context"]


def test_a_state_directory_that_cannot_be_made_is_said_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "none"))
    monkeypatch.setenv("HOME", str(tmp_path))
    binaries = tmp_path / "bin"
    binaries.mkdir()
    for name in BINARIES:
        (binaries / name).write_text("#!/bin/sh\nexit 1\n")
        (binaries / name).chmod(0o755)
    monkeypatch.setattr(local, "build_binaries", lambda _: binaries)
    monkeypatch.setattr(local, "ONYX_API_PORT", free_port())  # a make run here holds 18080
    (tmp_path / "a-file").write_text("")
    state = tmp_path / "a-file" / "state"
    assert local.main(["--state", str(state), "--build-script", str(BUILD_SCRIPT)]) == 1
    error = capsys.readouterr().err
    assert error.startswith("make run: ")
    assert "Not a directory" in error
    assert "Traceback" not in error


def test_a_stand_in_onyx_api_that_dies_stops_make_run_naming_its_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(local, "ONYX_API_PORT", free_port())
    plane = ControlPlane(tmp_path, tmp_path, Ports())
    broken = "mysql://nobody@nowhere/none"  # it exits at once: not a database it serves
    try:
        with pytest.raises(
            ControlPlaneError, match=r"the stand-in Onyx API exited; see .*onyx-api\.log"
        ):
            local.start_onyx_api(plane, broken)
    finally:
        processes.stop_all(tmp_path, grace=2)


def free_port() -> int:
    """A port nothing listens on (for the moment)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_a_port_another_program_answers_on_stops_make_run_before_anything_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Another make run's stand-in, say: it would answer for ours, which dies on bind.
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        monkeypatch.setattr(local, "ONYX_API_PORT", holder.getsockname()[1])
        plane = ControlPlane(tmp_path, tmp_path, Ports())
        with pytest.raises(ControlPlaneError, match="is taken by another program"):
            local.start_onyx_api(plane, f"sqlite:///{tmp_path / 'db.sqlite'}")
    assert processes.recorded(tmp_path) == []


def test_a_taken_onyx_api_port_stops_make_run_before_the_control_plane_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "none"))
    monkeypatch.setenv("HOME", str(tmp_path))

    def no_build(_: Path) -> Path:
        raise AssertionError("the control plane was started")

    monkeypatch.setattr(local, "build_binaries", no_build)
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        monkeypatch.setattr(local, "ONYX_API_PORT", holder.getsockname()[1])
        state = tmp_path / ".controlplane"
        assert local.main(["--state", str(state), "--build-script", str(BUILD_SCRIPT)]) == 1
    assert "is taken by another program" in capsys.readouterr().err


def test_the_line_make_run_prints_for_another_terminal_exports_what_the_operator_runs_with(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Without CRAFT_STATE_DIR and CRAFT_DATABASE_URL there, `craft-operator doctor` and
    # `credentials show` read ~/.local/state/craft-operator, not the operator's database.
    monkeypatch.delenv("CRAFT_SERVER_URL", raising=False)
    state = tmp_path / "a checkout" / ".controlplane"
    plane = ControlPlane(state, tmp_path / "bin", Ports())
    database = f"sqlite:///{state / 'operator' / 'craft-operator.db'}"
    environment = local.operator_environment(
        plane, state / "operator", database, "http://127.0.0.1:18080"
    )

    said = local.announcement(plane, "http://127.0.0.1:18080", environment)

    (export,) = [line for line in said.splitlines() if line.strip().startswith("export ")]
    exported = dict(word.split("=", 1) for word in shlex.split(export)[1:])
    assert exported == {
        "KUBECONFIG": str(state / "admin.kubeconfig"),
        "CRAFT_STATE_DIR": str(state / "operator"),
        "CRAFT_DATABASE_URL": database,
        "CRAFT_SERVER_URL": "http://127.0.0.1:18080",
    }


@pytest.mark.parametrize(
    ("reused", "said"),
    [
        (False, "so started a local control plane (https://127.0.0.1:16443), the stand-in"),
        (True, "so reusing the local control plane (https://127.0.0.1:16443) already running"),
    ],
)
def test_make_run_says_whether_it_started_the_local_control_plane_or_reused_it(
    tmp_path: Path, reused: bool, said: str
) -> None:
    plane = ControlPlane(tmp_path, tmp_path / "bin", Ports(apiserver=16443))
    first = local.announcement(plane, "http://127.0.0.1:18080", {}, reused=reused)
    assert said in first.splitlines()[0]


def test_the_stand_in_onyx_api_this_run_started_is_not_taken_for_another_program(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # `make run` again, with the control plane and its stand-in still running: it reuses
    # them (the README says so), rather than stop on the port its own stand-in holds.
    ours = processes.start(tmp_path, "onyx-api", [SLEEP, "60"])
    try:
        with socket.socket() as holder:
            holder.bind(("127.0.0.1", 0))
            holder.listen()
            monkeypatch.setattr(local, "ONYX_API_PORT", holder.getsockname()[1])
            local.refuse_a_taken_onyx_api_port(tmp_path)  # does not raise
    finally:
        processes.stop_all(tmp_path, grace=2)
        ours.wait(5)


def test_a_server_url_of_the_environment_is_the_one_the_operator_runs_with(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A developer pointing the local run at a real Onyx keeps it: the stand-in is only
    # the default.
    monkeypatch.setenv("CRAFT_SERVER_URL", "https://onyx.example.com")
    plane = ControlPlane(tmp_path, tmp_path / "bin", Ports())
    environment = local.operator_environment(
        plane, tmp_path / "operator", "sqlite:///db", "http://127.0.0.1:18080"
    )
    assert environment["CRAFT_SERVER_URL"] == "https://onyx.example.com"


class KubectlRecorder:
    """A control plane with no namespace yet and a default ServiceAccount once asked; the
    kubectl commands run against it, in order."""

    def __init__(self) -> None:
        self.commands: list[tuple[str, ...]] = []

    def get_json(self, path: str) -> dict[str, object] | None:
        return {"kind": "ServiceAccount"} if path.endswith("/serviceaccounts/default") else None

    def kubectl(self, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        self.commands.append(args)
        return subprocess.CompletedProcess(["kubectl", *args], 0, "", "")


def test_the_example_goes_into_a_restricted_namespace_with_its_network_policies(
    tmp_path: Path,
) -> None:
    # Without a NetworkPolicy restricting their egress no sandbox pod starts: minimal.yaml
    # would never be Ready. The namespace enforces the restricted Pod Security profile, as
    # the README's sandbox namespaces do.
    repo = Path(__file__).resolve().parents[3]
    plane = KubectlRecorder()

    local.apply_example(plane, repo)  # type: ignore[arg-type]

    namespace = local.SANDBOX_NAMESPACE
    labels = [c for c in plane.commands if c[:3] == ("label", "namespace", namespace)]
    assert labels, plane.commands
    assert set(labels[0][3:]) >= {
        "pod-security.kubernetes.io/enforce=restricted",
        "pod-security.kubernetes.io/enforce-version=latest",
    }
    policies = ("apply", "-n", namespace, "-k", str(repo / "manifests" / "sandbox-namespace"))
    example = ("apply", "-n", namespace, "-f", str(repo / "manifests/examples/minimal.yaml"))
    assert plane.commands.index(policies) < plane.commands.index(example)
    assert plane.commands.index(labels[0]) < plane.commands.index(example)


def test_a_second_make_run_while_the_first_ones_operator_runs_stops_before_anything_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Its advice to free the metrics port would otherwise start a second operator on the
    # same sandboxes and database.
    state = tmp_path / ".controlplane"
    processes.record_self(state, local.OPERATOR)  # this test's process stands for it
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "none"))
    monkeypatch.setenv("HOME", str(tmp_path))

    def no_build(_: Path) -> Path:
        raise AssertionError("the control plane was started")

    monkeypatch.setattr(local, "build_binaries", no_build)
    assert local.main(["--state", str(state), "--build-script", str(BUILD_SCRIPT)]) == 1
    error = capsys.readouterr().err
    assert f"the operator of another make run is running (pid {os.getpid()})" in error
    assert "Ctrl-C" in error


def test_the_record_of_an_operator_that_ended_does_not_stop_make_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    state = tmp_path / ".controlplane"
    ended = subprocess.run(["sh", "-c", "echo $$"], capture_output=True, text=True, check=True)
    record = state / "selves" / f"{local.OPERATOR}.pid"
    record.parent.mkdir(parents=True)
    record.write_text(f"{ended.stdout.strip()}\n{os.readlink('/proc/self/exe')}\n1\n")
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "none"))
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setattr(local, "ONYX_API_PORT", free_port())

    def sentinel(_: Path) -> Path:
        raise ControlPlaneError("the control plane would be started now")

    monkeypatch.setattr(local, "build_binaries", sentinel)
    assert local.main(["--state", str(state), "--build-script", str(BUILD_SCRIPT)]) == 1
    assert "the control plane would be started now" in capsys.readouterr().err
