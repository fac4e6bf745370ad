"""Specification of ``status.userLibrary`` after a successful sync Job."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from craft_operator.reconciler.sync_jobs import JobOutcome, synced_status

NOW = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)


def outcome(result: dict[str, Any], revision: str = "r7") -> JobOutcome:
    """A successful Job's outcome with this termination-message result."""
    return JobOutcome(True, revision, "pod-uid", "cfg", result, False, "")


def test_the_status_reports_the_figures_of_the_jobs_result() -> None:
    result = {"files": 3, "bytes": 10, "bytesTransferred": 4, "durationSeconds": 1.5, "skipped": 0}
    status = synced_status(outcome(result), now=NOW, job_sequence=2)
    assert status.model_dump(by_alias=True, mode="json", exclude_none=True) == {
        "observedRevision": "r7",
        "lastSyncTime": "2026-03-01T12:00:00Z",
        **result,
        "podUID": "pod-uid",
        "configHash": "cfg",
        "jobSequence": 2,
    }


def test_a_figure_that_is_not_a_number_is_left_out_instead_of_failing_the_pass() -> None:
    result = {"files": "many", "bytes": True, "bytesTransferred": None, "durationSeconds": "x"}
    status = synced_status(outcome(result, revision=""), now=NOW, job_sequence=None)
    assert (status.files, status.bytes, status.bytes_transferred) == (None, None, None)
    assert status.duration_seconds is None
    assert status.observed_revision is None
