"""The reason a SandboxFailedError gives: the first condition, in the operator's order,
that says the sandbox cannot become Ready until someone changes something, not a
transient one that came earlier in the order."""

from __future__ import annotations

from typing import Any

import pytest

from craft_operator.client.readiness import failure_of, progress_of


def failed_sandbox(conditions: dict[str, tuple[str, str]]) -> dict[str, Any]:
    return {
        "metadata": {"namespace": "craft", "name": "alice", "generation": 2},
        "status": {
            "phase": "Failed",
            "observedGeneration": 2,
            "conditions": [
                {"type": type_, "status": status, "reason": reason, "message": f"{reason}"}
                for type_, (status, reason) in conditions.items()
            ],
        },
    }


@pytest.mark.parametrize(
    ("credentials", "pod"),
    [
        (("False", "RevokeFailed"), ("False", "PolicyDenied")),
        (("False", "DatabaseUnavailable"), ("False", "PodFailedRepeatedly")),
    ],
    ids=["denied, its revocation retried", "failed pods, then a database outage"],
)
def test_a_transient_condition_earlier_in_the_order_is_not_why_it_failed(
    credentials: tuple[str, str], pod: tuple[str, str]
) -> None:
    """The backend would read DatabaseUnavailable as worth waiting for."""
    obj = failed_sandbox(
        {
            "CredentialsReady": credentials,
            "SkillRendered": ("Unknown", "Waiting"),
            "PodReady": pod,
            "Ready": ("False", credentials[1]),
        }
    )

    failure = failure_of(progress_of(obj))

    assert failure is not None
    assert (failure.condition_type, failure.reason) == ("PodReady", pod[1])


def test_a_failed_sandbox_whose_reason_is_not_listed_still_fails_with_its_first_false() -> None:
    obj = failed_sandbox(
        {
            "CredentialsReady": ("True", "Minted"),
            "PodReady": ("False", "WorkspaceSizeInvalid"),
            "Ready": ("False", "WorkspaceSizeInvalid"),
        }
    )

    failure = failure_of(progress_of(obj))

    assert failure is not None
    assert (failure.condition_type, failure.reason) == ("PodReady", "WorkspaceSizeInvalid")
