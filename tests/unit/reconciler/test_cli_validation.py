"""Specification of what each ``onyx-cli validate-config`` exit code means."""

from __future__ import annotations

import pytest

from craft_operator.reconciler.cli_validation import (
    EXIT_AUTH_FAILURE,
    EXIT_MEANINGS,
    EXIT_OK,
    VALIDATE_ARGV,
    describe_exit,
)


@pytest.mark.parametrize(
    ("code", "reason"),
    [
        (0, "Validated"),
        (1, "CLIError"),
        (2, "BadRequest"),
        (3, "NotConfigured"),
        (4, "AuthFailed"),
        (5, "ServerUnreachable"),
        (6, "RateLimited"),
        (7, "Timeout"),
        (8, "ServerError"),
        (9, "NotAvailable"),
        (127, "CLIMissing"),
    ],
)
def test_every_documented_exit_code_maps_to_its_reason(code: int, reason: str) -> None:
    found, message = describe_exit(code)
    assert found == reason
    assert message


def test_reasons_are_distinct_and_searchable() -> None:
    reasons = [reason for reason, _ in EXIT_MEANINGS.values()]
    assert len(set(reasons)) == len(reasons)
    assert all(reason.isidentifier() and reason[0].isupper() for reason in reasons)


def test_every_code_from_the_reference_has_a_meaning() -> None:
    assert set(range(10)) <= set(EXIT_MEANINGS)


@pytest.mark.parametrize("code", [10, 42, 126, 128, 255, -1])
def test_an_unknown_code_is_a_cli_error_naming_the_code(code: int) -> None:
    reason, message = describe_exit(code)
    assert reason == "CLIError"
    assert str(code) in message


def test_success_and_auth_failure_are_the_codes_the_reconciler_acts_on() -> None:
    assert describe_exit(EXIT_OK)[0] == "Validated"
    assert describe_exit(EXIT_AUTH_FAILURE)[0] == "AuthFailed"


def test_the_validation_runs_as_an_argv_without_a_shell() -> None:
    assert VALIDATE_ARGV == ("onyx-cli", "validate-config")
