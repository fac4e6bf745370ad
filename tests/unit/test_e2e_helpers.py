"""The e2e suite's helpers, tested where no Docker runs: skip line, command errors, waits."""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

import pytest

from tests.e2e.cluster import SKIP_NO_DOCKER, CommandError, run, skip_reason, wait_for

pytestmark = pytest.mark.unit


def fake_tool(directory: Path, name: str, exit_code: int) -> None:
    tool = directory / name
    tool.write_text(f"#!/bin/sh\nexit {exit_code}\n")
    tool.chmod(tool.stat().st_mode | stat.S_IEXEC)


def test_without_a_docker_cli_the_suite_skips_with_the_one_line_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    assert skip_reason() == SKIP_NO_DOCKER


def test_when_docker_info_fails_the_suite_skips_with_the_one_line_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_tool(tmp_path, "docker", 1)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert skip_reason() == SKIP_NO_DOCKER
    assert "\n" not in SKIP_NO_DOCKER


def test_with_docker_but_no_kind_the_reason_names_kind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_tool(tmp_path, "docker", 0)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert skip_reason() == "e2e: kind is not installed; install it to run make e2e"


def test_with_docker_kind_and_kubectl_the_suite_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for tool in ("docker", "kind", "kubectl"):
        fake_tool(tmp_path, tool, 0)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert skip_reason() is None


def test_a_failed_command_names_the_command_its_exit_code_and_stderr() -> None:
    argv = [sys.executable, "-c", "import sys; sys.stderr.write('no such cluster'); sys.exit(4)"]
    with pytest.raises(CommandError) as failure:
        run(argv)
    assert "exit 4" in str(failure.value)
    assert "no such cluster" in str(failure.value)
    assert sys.executable in str(failure.value)


def test_a_command_gets_its_stdin_and_the_callers_environment() -> None:
    script = "import os, sys; sys.stdout.write(sys.stdin.read() + os.environ['E2E_MARK'])"
    result = run(
        [sys.executable, "-c", script], stdin=b"token:", env={**os.environ, "E2E_MARK": "x"}
    )
    assert result.stdout == b"token:x"


def test_a_command_that_hangs_fails_with_a_timeout_naming_it() -> None:
    with pytest.raises(CommandError, match="timed out after 1s"):
        run([sys.executable, "-c", "import time; time.sleep(30)"], timeout=1)


def test_a_wait_returns_the_first_value_the_probe_finds() -> None:
    answers = iter([None, None, "Ready"])
    assert wait_for(lambda: next(answers), what="Ready", timeout=10, interval=0) == "Ready"


def test_a_wait_that_times_out_says_what_it_waited_for_what_it_last_saw_and_the_diagnosis() -> None:
    def probe() -> None:
        raise CommandError("exit 1: kubectl get csb alice\nNotFound")

    with pytest.raises(AssertionError) as failure:
        wait_for(probe, what="alice Ready", timeout=0, interval=0, diagnose=lambda: "pods: none")
    message = str(failure.value)
    assert "waiting for alice Ready" in message
    assert "NotFound" in message
    assert "pods: none" in message
