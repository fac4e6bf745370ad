"""The two images, read from their Dockerfiles: pins, users, entry points and contents.

No Docker engine is needed: the Dockerfiles are parsed, and what can be run here is run
(the pinned onyx-cli from the virtualenv, the sandbox's keep-alive command under /bin/sh).
The e2e suite builds the real images.
"""

from __future__ import annotations

import importlib.metadata
import os
import re
import signal
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from click.testing import CliRunner

from craft_operator.builders.pod import PAT_FILE
from craft_operator.cli import main
from tests.support.dockerfile import Stage, parse_dockerfile

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]
SANDBOX_DOCKERFILE = REPO / "sandbox-image" / "Dockerfile"
OPERATOR_DOCKERFILE = REPO / "operator" / "Dockerfile"
#: An exact Python release on Debian slim: never `latest`, never a floating `3.11-slim`.
PINNED_SLIM_PYTHON = re.compile(
    r"^python:\d+\.\d+\.\d+-slim-(bookworm|trixie)(@sha256:[0-9a-f]{64})?$"
)
S3_TOOLS = ("awscli", "aws-cli", "boto", "s3cmd", "rclone", "s3fs", "minio", "mc ", "goofys")
DEV_TOOLS = ("gcc", "build-essential", "git", "make", "curl", "wget", "[dev]", "[test]")


def pinned_onyx_cli() -> str:
    """The onyx-cli version pinned in pyproject's test extra (the one the skill is checked with)."""
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    pins = [
        spec.split("==", 1)[1]
        for spec in pyproject["project"]["optional-dependencies"]["test"]
        if spec.replace(" ", "").startswith("onyx-cli==")
    ]
    assert len(pins) == 1, "pyproject's test extra must pin onyx-cli with =="
    return pins[0]


def final_user(stage: Stage) -> str:
    user = stage.last("USER")
    assert user is not None, "the image must set USER (it would run as root)"
    return user.value


@pytest.fixture(scope="module")
def sandbox() -> Stage:
    stages = parse_dockerfile(SANDBOX_DOCKERFILE)
    assert len(stages) == 1
    return stages[0]


@pytest.fixture(scope="module")
def operator_stages() -> list[Stage]:
    return parse_dockerfile(OPERATOR_DOCKERFILE)


# The sandbox image.


def test_the_sandbox_image_is_built_on_an_exactly_versioned_slim_python(sandbox: Stage) -> None:
    assert PINNED_SLIM_PYTHON.match(sandbox.base), sandbox.base


def test_the_sandbox_image_installs_the_onyx_cli_version_the_tests_use(sandbox: Stage) -> None:
    installs = re.findall(r"onyx-cli\s*([=<>!~]=?\s*[\w.]+)?", sandbox.run_text())
    specs = [spec.replace(" ", "") for spec in installs if spec]
    assert specs == [f"=={pinned_onyx_cli()}"]


def test_the_sandbox_runs_as_uid_and_gid_1000(sandbox: Stage) -> None:
    assert final_user(sandbox) in ("1000", "1000:1000")
    run = sandbox.run_text()
    assert re.search(r"useradd\b[^;&]*--uid 1000\b[^;&]*--gid 1000\b", run)
    assert re.search(r"groupadd\b[^;&]*--gid 1000\b", run)


def test_the_workspace_layout_exists_and_belongs_to_the_sandbox_user(sandbox: Stage) -> None:
    run = sandbox.run_text()
    mkdir = re.search(r"mkdir -p ([^;&]+)", run)
    assert mkdir is not None
    assert {"/workspace/skills", "/workspace/user_library"} <= set(mkdir.group(1).split())
    assert re.search(r"chown -R 1000:1000 /workspace\b", run)
    workdir = sandbox.last("WORKDIR")
    assert workdir is not None
    assert workdir.value == "/workspace"


def test_the_sandbox_image_checks_that_the_tools_the_operator_runs_are_present(
    sandbox: Stage,
) -> None:
    run = sandbox.run_text()
    for tool in ("sh", "tar", "dd", "head"):
        assert f"command -v {tool}" in run
    assert "readlink -f" in run  # the onyx-cli wrapper finds the pinned cli with it
    assert "mv -fT" in run  # deliveries never move a file into a planted directory


def test_the_sandbox_image_has_no_s3_client(sandbox: Stage) -> None:
    text = " ".join(item.value for item in sandbox.instructions).lower() + " "
    assert [tool for tool in S3_TOOLS if tool in text] == []


def test_the_sandbox_command_keeps_running_until_sigterm_and_then_exits_cleanly(
    sandbox: Stage,
) -> None:
    cmd = sandbox.last("CMD")
    assert cmd is not None
    argv = cmd.exec_form()
    assert argv[0] == "sh"
    process = subprocess.Popen(["/bin/sh", *argv[1:]])
    try:
        with pytest.raises(subprocess.TimeoutExpired):
            process.wait(timeout=1)
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=10) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_the_pinned_onyx_cli_is_installed_here_and_runs() -> None:
    version = pinned_onyx_cli()
    assert importlib.metadata.version("onyx-cli") == version
    binary = Path(sys.executable).with_name("onyx-cli")
    result = subprocess.run(
        [str(binary), "--version"], capture_output=True, text=True, timeout=30, check=False
    )
    assert result.returncode == 0, result.stderr
    assert f"v{version}" in result.stdout


def test_the_pinned_onyx_cli_reports_missing_configuration_with_exit_code_3(
    tmp_path: Path,
) -> None:
    # The sandbox relies on the environment alone; without ONYX_PAT the CLI says so (3).
    env = {key: value for key, value in os.environ.items() if not key.startswith("ONYX_")}
    env["HOME"] = str(tmp_path)
    env["XDG_CONFIG_HOME"] = str(tmp_path / ".config")
    binary = Path(sys.executable).with_name("onyx-cli")
    result = subprocess.run(
        [str(binary), "validate-config"],
        capture_output=True,
        text=True,
        timeout=30,
        env=env,
        check=False,
    )
    assert result.returncode == 3, result.stdout + result.stderr
    assert "ONYX_PAT" in result.stdout + result.stderr


WRAPPER = Path(__file__).parents[2] / "sandbox-image" / "onyx-cli"
SERVER = "https://onyx.example.com"


def run_wrapper(tmp_path: Path, real: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """The image's onyx-cli wrapper, with ``real`` as the onyx-cli it runs."""
    clean = {key: value for key, value in os.environ.items() if not key.startswith("ONYX_")}
    clean.update({"HOME": str(tmp_path), "ONYX_CLI_REAL": str(real), "ONYX_SERVER_URL": SERVER})
    clean.update(env)
    return subprocess.run(
        ["/bin/sh", str(WRAPPER), "validate-config"],
        capture_output=True,
        text=True,
        timeout=30,
        env=clean,
        check=False,
    )


@pytest.fixture
def echoing_cli(tmp_path: Path) -> Path:
    """An onyx-cli stand-in that prints the PAT it was given and its arguments."""
    script = tmp_path / "onyx-cli.real"
    script.write_text('#!/bin/sh\necho "pat=${ONYX_PAT-unset} args=$*"\n')
    script.chmod(0o755)
    return script


def test_the_sandbox_image_puts_the_wrapper_in_front_of_the_pinned_onyx_cli(
    sandbox: Stage,
) -> None:
    assert "mv /usr/local/bin/onyx-cli /usr/local/bin/onyx-cli.real" in sandbox.run_text()
    copies = [item.value for item in sandbox.all("COPY")]
    assert "--chmod=0755 onyx-cli /usr/local/bin/onyx-cli" in copies


def test_the_wrapper_reads_the_delivered_pat_when_the_environment_has_none(
    tmp_path: Path, echoing_cli: Path
) -> None:
    pat = tmp_path / "pat"
    pat.write_text("onyx_pat_first")
    assert run_wrapper(tmp_path, echoing_cli, ONYX_PAT_FILE=str(pat)).stdout.strip() == (
        "pat=onyx_pat_first args=validate-config"
    )
    pat.write_text("onyx_pat_renewed")
    assert (
        "pat=onyx_pat_renewed" in run_wrapper(tmp_path, echoing_cli, ONYX_PAT_FILE=str(pat)).stdout
    )


def test_the_wrapper_reads_by_default_the_file_the_operator_delivers_the_pat_into() -> None:
    """Without ONYX_PAT_FILE (as in the sandbox), the wrapper's PAT is the operator's
    PAT_FILE: another default would leave the agent's onyx-cli with no token at all."""
    assert f'pat_file="${{ONYX_PAT_FILE:-{PAT_FILE}}}"' in WRAPPER.read_text()


def test_a_pat_in_the_environment_wins_over_the_delivered_file(
    tmp_path: Path, echoing_cli: Path
) -> None:
    pat = tmp_path / "pat"
    pat.write_text("onyx_pat_file")
    result = run_wrapper(tmp_path, echoing_cli, ONYX_PAT="onyx_pat_env", ONYX_PAT_FILE=str(pat))
    assert "pat=onyx_pat_env" in result.stdout


def test_without_a_delivered_pat_the_pinned_cli_says_it_is_not_configured(tmp_path: Path) -> None:
    real = Path(sys.executable).with_name("onyx-cli")
    result = run_wrapper(tmp_path, real, ONYX_PAT_FILE=str(tmp_path / "missing"))
    assert result.returncode == 3, result.stdout + result.stderr


# The operator image.


def test_the_operator_image_builds_wheels_then_installs_them_into_a_fresh_slim_stage(
    operator_stages: list[Stage],
) -> None:
    build, runtime = operator_stages[0], operator_stages[-1]
    assert len(operator_stages) == 2
    assert build.name == "build"
    assert PINNED_SLIM_PYTHON.match(runtime.base), runtime.base
    assert runtime.base == build.base, "build and run on the same Python"
    assert "pip wheel" in build.run_text()
    install = runtime.run_text()
    assert "--no-index" in install
    assert '"craft-operator[postgres]"' in install
    assert "from=build" in install


def test_the_operator_image_runs_craft_operator_as_a_non_root_user(
    operator_stages: list[Stage],
) -> None:
    runtime = operator_stages[-1]
    assert final_user(runtime) in ("1000", "1000:1000")
    entrypoint, cmd = runtime.last("ENTRYPOINT"), runtime.last("CMD")
    assert entrypoint is not None
    assert cmd is not None
    assert entrypoint.exec_form() == ["craft-operator"]
    assert cmd.exec_form() == ["run"]


def test_the_operator_image_command_line_exists(operator_stages: list[Stage]) -> None:
    runtime = operator_stages[-1]
    cmd = runtime.last("CMD")
    assert cmd is not None
    result = CliRunner().invoke(main, [*cmd.exec_form(), "--help"])
    assert result.exit_code == 0, result.output
    # Job-mode library sync runs the same image with this command.
    assert CliRunner().invoke(main, ["sync-user-library", "--help"]).exit_code == 0


def test_the_operator_runtime_stage_carries_no_build_or_dev_tools(
    operator_stages: list[Stage],
) -> None:
    runtime = operator_stages[-1]
    text = " ".join(item.value for item in runtime.instructions).lower()
    assert "apt-get" not in text
    assert [tool for tool in DEV_TOOLS if re.search(rf"(^|[\s\"'=]){re.escape(tool)}", text)] == []
    assert "pip uninstall --yes pip" in runtime.run_text()
    assert not any(item.keyword == "COPY" for item in runtime.instructions)


def test_the_operator_image_state_directory_is_its_settings_default(
    operator_stages: list[Stage],
) -> None:
    runtime = operator_stages[-1]
    env = " ".join(item.value for item in runtime.all("ENV"))
    assert "CRAFT_STATE_DIR=/var/lib/craft-operator" in env
    assert "chown 1000:1000 /var/lib/craft-operator" in runtime.run_text()


def test_the_build_context_sends_exactly_what_the_build_copies(
    operator_stages: list[Stage],
) -> None:
    ignore = (REPO / ".dockerignore").read_text(encoding="utf-8").splitlines()
    patterns = [line.strip() for line in ignore if line.strip() and not line.startswith("#")]
    assert patterns[0] == "*", "the context starts empty; the Dockerfile's inputs are re-included"
    included = {pattern[1:].rstrip("/") for pattern in patterns if pattern.startswith("!")}
    for copy in operator_stages[0].all("COPY"):
        sources = copy.value.split()[:-1]
        for source in sources:
            assert (REPO / source).exists(), source
            assert source.rstrip("/") in included, f"{source} is not in the build context"


def test_a_pat_path_that_is_not_a_readable_file_is_said_not_left_to_onyx_cli(
    tmp_path: Path, echoing_cli: Path
) -> None:
    """onyx-cli without ONYX_PAT falls back to the api_key of its config file under $HOME,
    which the agent writes: a directory planted at the PAT's path must not lead there."""
    planted = tmp_path / "pat"
    planted.mkdir()
    result = run_wrapper(tmp_path, echoing_cli, ONYX_PAT_FILE=str(planted))
    assert result.returncode == 3
    assert "cannot read the sandbox's PAT" in result.stderr
    assert "pat=" not in result.stdout


def test_without_a_server_url_the_wrapper_hands_the_delivered_pat_to_no_default_server(
    tmp_path: Path, echoing_cli: Path
) -> None:
    # onyx-cli's built-in default is Onyx's cloud: a process with a scrubbed environment
    # would send a self-hosted deployment's PAT there.
    pat = tmp_path / "pat"
    pat.write_text("onyx_pat_file")
    result = run_wrapper(tmp_path, echoing_cli, ONYX_PAT_FILE=str(pat), ONYX_SERVER_URL="")
    assert result.returncode == 3
    assert "ONYX_SERVER_URL is not set" in result.stderr
    assert "onyx_pat_file" not in result.stdout + result.stderr


def test_the_wrapper_finds_the_pinned_cli_beside_it_when_run_through_a_link(
    tmp_path: Path,
) -> None:
    installed = tmp_path / "usr-local-bin"
    installed.mkdir()
    wrapper = installed / "onyx-cli"
    wrapper.write_text(WRAPPER.read_text())
    wrapper.chmod(0o755)
    real = installed / "onyx-cli.real"
    real.write_text('#!/bin/sh\necho "real args=$*"\n')
    real.chmod(0o755)
    link = tmp_path / "home-bin" / "onyx-cli"
    link.parent.mkdir()
    link.symlink_to(wrapper)
    clean = {key: value for key, value in os.environ.items() if not key.startswith("ONYX_")}

    result = subprocess.run(
        [str(link), "search", "x"],
        capture_output=True,
        text=True,
        timeout=30,
        env={**clean, "ONYX_PAT": "onyx_pat_env"},
        check=False,
    )

    assert result.stdout.strip() == "real args=search x", result.stderr
