"""``doctor``'s settings check says what a missing CRAFT_SERVER_URL costs, truly: a
sandbox's own spec.serverURL is no way around it unless the platform's policy lists it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from craft_operator.doctor import Status
from craft_operator.doctor.settings import check_settings


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in list(os.environ):
        if name.startswith("CRAFT_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("CRAFT_STATE_DIR", str(tmp_path))


def server_url_warning() -> str:
    results, _ = check_settings()
    [found] = [result for result in results if result.name == "server URL"]
    assert found.status == Status.WARN
    return f"{found.detail} {found.fix}"


def test_without_a_server_url_doctor_says_spec_server_url_needs_the_policy_to_list_it() -> None:
    said = server_url_warning()

    assert "every CraftSandbox must set spec.serverURL" not in said
    assert "spec.serverURL" in said
    assert "serverURLs" in said
    assert "PolicyDenied" in said


def test_without_a_server_url_doctor_says_pools_make_no_pods() -> None:
    said = server_url_warning()

    assert "CraftSandboxPool" in said
    assert "NoServerURL" in said


def test_with_a_server_url_doctor_does_not_warn_of_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CRAFT_SERVER_URL", "http://onyx.internal:8080")

    results, _ = check_settings()

    assert [result.name for result in results if result.name == "server URL"] == []
