"""``craft-operator run`` without a reachable cluster: one clear line on stderr, no traceback.

The console script runs in a subprocess with a clean environment (no CRAFT_* variables, no
in-cluster service variables, HOME in a temporary directory), as a user would start it.
"""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest
import uvloop
from click.testing import CliRunner

from craft_operator.cli import main
from craft_operator.cli import run as run_module
from craft_operator.cli.run import loop_factory
from craft_operator.config import Settings
from craft_operator.credentials import generate_key_entry

pytestmark = pytest.mark.unit

SCRIPT = Path(sys.executable).with_name("craft-operator")


def closed_port() -> int:
    """A local TCP port nothing listens on (bound, then released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


def write_kubeconfig(path: Path, server: str) -> Path:
    """A kubeconfig whose current context talks to ``server`` with a token."""
    path.write_text(
        f"""apiVersion: v1
kind: Config
clusters:
- name: nowhere
  cluster:
    server: {server}
    insecure-skip-tls-verify: true
users:
- name: someone
  user:
    token: not-a-real-token
contexts:
- name: nowhere
  context: {{cluster: nowhere, user: someone}}
current-context: nowhere
""",
        encoding="utf-8",
    )
    return path


def run_operator(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """Run the installed ``craft-operator`` with a clean environment plus ``env``."""
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    environment = {"PATH": "/usr/bin:/bin", "HOME": str(home), "LANG": "C.UTF-8", **env}
    return subprocess.run(
        [str(SCRIPT), *args],
        capture_output=True,
        text=True,
        env=environment,
        timeout=120,
        check=False,
    )


def only_line(completed: subprocess.CompletedProcess[str]) -> str:
    """The single stderr line of a failed run (and assert it is the only output)."""
    assert "Traceback" not in completed.stderr
    lines = completed.stderr.splitlines()
    assert len(lines) == 1, completed.stderr
    assert completed.stdout == ""
    assert lines[0].startswith("craft-operator: ")
    return lines[0]


def test_a_cluster_that_does_not_answer_is_one_line_and_exit_1(tmp_path: Path) -> None:
    port = closed_port()
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", f"https://127.0.0.1:{port}")
    completed = run_operator(tmp_path, "run", KUBECONFIG=str(kubeconfig))
    assert completed.returncode == 1
    line = only_line(completed)
    assert f"cannot reach the Kubernetes API server at https://127.0.0.1:{port}" in line
    assert "not-a-real-token" not in line


def test_no_kubeconfig_and_no_in_cluster_service_is_one_line_and_exit_1(tmp_path: Path) -> None:
    completed = run_operator(tmp_path, "run", KUBECONFIG=str(tmp_path / "missing"))
    assert completed.returncode == 1
    line = only_line(completed)
    assert "no Kubernetes credentials found" in line
    assert "KUBECONFIG" in line


def test_an_unreadable_kubeconfig_is_one_line(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("clusters: [\n", encoding="utf-8")
    completed = run_operator(tmp_path, "run", KUBECONFIG=str(kubeconfig))
    assert completed.returncode == 1
    assert "cannot load Kubernetes credentials" in only_line(completed)


@pytest.mark.parametrize(
    ("server", "problem"),
    [
        ("https://bob:secret@127.0.0.1:1", "https://…@127.0.0.1:1 carries credentials"),
        ("ftp://127.0.0.1:6443", "ftp://127.0.0.1:6443 has a scheme other than"),
        ("https://127.0.0.1:99999", "https://127.0.0.1:99999 has an invalid port"),
    ],
)
def test_a_server_url_the_client_cannot_use_is_one_line_without_its_password(
    tmp_path: Path, server: str, problem: str
) -> None:
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", server)
    completed = run_operator(tmp_path, "run", "--standalone", KUBECONFIG=str(kubeconfig))
    assert completed.returncode == 1
    line = only_line(completed)
    assert f"the kubeconfig's API server URL {problem}" in line
    assert line.endswith(": fix the kubeconfig")
    assert "secret" not in line


def test_bad_settings_stop_the_start_before_any_cluster_lookup(tmp_path: Path) -> None:
    password = "pa55-W0rd-never-shown"
    completed = run_operator(
        tmp_path,
        "run",
        KUBECONFIG=str(tmp_path / "missing"),
        CRAFT_METRICS_PORT="abc",
        CRAFT_DATABASE_URL=f"postgresql+psycopg://onyx:{password}@db/onyx",
    )
    assert completed.returncode == 2
    line = only_line(completed)
    assert "CRAFT_METRICS_PORT" in line
    assert password not in line


def test_an_unknown_event_loop_stops_the_start_naming_the_setting(tmp_path: Path) -> None:
    completed = run_operator(
        tmp_path, "run", KUBECONFIG=str(tmp_path / "missing"), CRAFT_EVENT_LOOP="trio"
    )
    assert completed.returncode == 2
    assert "CRAFT_EVENT_LOOP" in only_line(completed)


def test_the_operator_runs_on_uvloop_unless_asyncio_is_asked_for() -> None:
    uvloop_factory = loop_factory("uvloop")
    assert uvloop_factory is not None
    loop = uvloop_factory()
    try:
        assert isinstance(loop, uvloop.Loop)
    finally:
        loop.close()
    assert loop_factory("asyncio") is None
    assert Settings().event_loop == "uvloop"


def test_namespace_and_all_namespaces_exclude_each_other() -> None:
    result = CliRunner().invoke(main, ["run", "-n", "craft", "--all-namespaces"])
    assert result.exit_code == 2
    assert result.stderr.strip() == (
        "craft-operator: use either --namespace or --all-namespaces, not both"
    )


def test_run_help_lists_its_options() -> None:
    result = CliRunner().invoke(main, ["run", "--help"])
    assert result.exit_code == 0
    for option in ("--namespace", "--all-namespaces", "--standalone", "--liveness"):
        assert option in result.output


@pytest.mark.parametrize("command", [[], ["crd"], ["run"]], ids=["main", "crd", "run"])
def test_every_command_has_help(command: list[str]) -> None:
    result = CliRunner().invoke(main, [*command, "--help"])
    assert result.exit_code == 0
    assert result.output.startswith("Usage: ")


@pytest.mark.parametrize(
    ("env", "args", "why"),
    [
        ({"KUBERNETES_SERVICE_HOST": "10.96.0.1"}, (), "it runs in a pod"),
        (
            {"CRAFT_DATABASE_URL": "postgresql+psycopg://onyx@127.0.0.1:1/onyx"},
            (),
            "CRAFT_DATABASE_URL is a Postgres database",
        ),
        ({}, ("--peering", "craft-operator", "--priority", "100"), "it peers"),
    ],
    ids=["in-cluster", "postgres", "peering"],
)
def test_production_without_a_key_ring_stops_at_start_naming_the_setting(
    tmp_path: Path, env: dict[str, str], args: tuple[str, ...], why: str
) -> None:
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", f"https://127.0.0.1:{closed_port()}")
    completed = run_operator(tmp_path, "run", *args, KUBECONFIG=str(kubeconfig), **env)
    assert completed.returncode == 2
    line = only_line(completed)
    assert "CRAFT_ENCRYPTION_KEYS (or CRAFT_ENCRYPTION_KEYS_FILE) must be set" in line
    assert why in line
    assert not list((tmp_path / "home").rglob("dev-encryption-keys")), "no ring was made"


def test_a_developer_without_a_key_ring_gets_the_development_one(tmp_path: Path) -> None:
    # Nothing says production: the run goes on to the cluster (unreachable here).
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", f"https://127.0.0.1:{closed_port()}")
    completed = run_operator(tmp_path, "run", KUBECONFIG=str(kubeconfig))
    assert completed.returncode == 1
    assert "CRAFT_ENCRYPTION_KEYS" not in only_line(completed)


def test_postgres_without_a_cluster_id_stops_at_start_naming_the_setting(tmp_path: Path) -> None:
    # Onyx's Postgres may be shared with other clusters' operators: without an id of its
    # own, this operator could not tell its credential rows from theirs.
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", f"https://127.0.0.1:{closed_port()}")
    completed = run_operator(
        tmp_path,
        "run",
        KUBECONFIG=str(kubeconfig),
        CRAFT_DATABASE_URL="postgresql+psycopg://onyx@127.0.0.1:1/onyx",
        CRAFT_ENCRYPTION_KEYS=generate_key_entry("k1").get_secret_value(),
    )
    assert completed.returncode == 2
    assert "CRAFT_CLUSTER_ID must be set" in only_line(completed)


@pytest.mark.parametrize(
    "url",
    [
        "postgresql+psycopg://craft:pa@ssSECRET@127.0.0.1:5432/onyx",
        "postgresql+psycopg://craft:pw@127.0.0.1:54x/onyx",
        "mysql://craft:pw@127.0.0.1/onyx",
        "",
    ],
    ids=["at-sign-in-password", "port-not-a-number", "not-postgres", "empty"],
)
def test_a_database_url_the_operator_cannot_open_stops_it_at_start(
    tmp_path: Path, url: str
) -> None:
    """Not a condition on every sandbox later; and never the password, whose tail an
    unencoded @ makes the host that a driver's error would name."""
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", f"https://127.0.0.1:{closed_port()}")
    completed = run_operator(
        tmp_path,
        "run",
        KUBECONFIG=str(kubeconfig),
        CRAFT_DATABASE_URL=url,
        CRAFT_ENCRYPTION_KEYS=generate_key_entry("k1").get_secret_value(),
        CRAFT_CLUSTER_ID="east",
    )
    assert completed.returncode == 2
    line = only_line(completed)
    assert "CRAFT_DATABASE_URL" in line
    assert "SECRET" not in line


def test_postgres_with_a_cluster_id_goes_on_to_the_cluster(tmp_path: Path) -> None:
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", f"https://127.0.0.1:{closed_port()}")
    completed = run_operator(
        tmp_path,
        "run",
        KUBECONFIG=str(kubeconfig),
        CRAFT_DATABASE_URL="postgresql+psycopg://onyx@127.0.0.1:1/onyx",
        CRAFT_ENCRYPTION_KEYS=generate_key_entry("k1").get_secret_value(),
        CRAFT_CLUSTER_ID="east",
    )
    assert completed.returncode == 1
    assert "CRAFT_CLUSTER_ID" not in only_line(completed)


@pytest.mark.parametrize("value", ["team-*", " team-a!", "Team_A", "", ","])
def test_a_namespace_option_that_names_no_namespace_stops_the_start(value: str) -> None:
    # kopf drops such a name and watches nothing: the operator would serve no sandbox.
    result = CliRunner().invoke(main, ["run", "-n", value])

    assert result.exit_code == 2
    assert "--namespace" in result.output


def test_a_namespace_option_takes_a_comma_list_as_craft_namespaces_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: dict[str, object] = {}

    def refuse(_settings: Settings, watched: list[str], _peering: object) -> object:
        seen["watched"] = watched
        raise SystemExit(0)

    monkeypatch.setattr(run_module, "_cluster_problem", refuse)
    monkeypatch.setenv("CRAFT_STATE_DIR", str(tmp_path))
    result = CliRunner().invoke(main, ["run", "--standalone", "-n", "team-a, team-b", "-n", "c"])

    assert result.exit_code == 0, result.output
    assert seen["watched"] == ["team-a", "team-b", "c"]


def test_an_empty_peering_name_is_refused_not_taken_for_standalone(tmp_path: Path) -> None:
    # A blank templated argument: two replicas would both be active.
    result = CliRunner().invoke(
        main, ["run", "--peering", ""], env={"CRAFT_STATE_DIR": str(tmp_path)}
    )

    assert result.exit_code == 2
    assert "--peering names no peering object" in result.output


@pytest.mark.parametrize("url", ["not a url", "http://0.0.0.0:99999/healthz", "https://:8080/x"])
def test_a_liveness_url_kopf_cannot_serve_is_refused_as_an_option(url: str) -> None:
    result = CliRunner().invoke(main, ["run", "--liveness", url])

    assert result.exit_code == 2
    assert "--liveness" in result.output


def test_a_liveness_port_in_use_stops_the_start_in_one_line(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        completed = run_operator(
            tmp_path,
            "run",
            "--liveness",
            f"http://127.0.0.1:{port}/healthz",
            CRAFT_STATE_DIR=str(tmp_path / "state"),
        )

    assert completed.returncode == 1
    assert "cannot be served" in only_line(completed)


def test_a_liveness_port_that_is_the_metrics_port_stops_the_start_in_one_line(
    tmp_path: Path,
) -> None:
    completed = run_operator(
        tmp_path,
        "run",
        "--liveness",
        "http://0.0.0.0:8080/healthz",
        CRAFT_STATE_DIR=str(tmp_path / "state"),
        CRAFT_METRICS_PORT="8080",
    )

    assert completed.returncode == 1
    assert "CRAFT_METRICS_PORT are the same port 8080" in only_line(completed)
