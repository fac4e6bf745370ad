"""What the status writer notices in the API server's answer to its write."""

from __future__ import annotations

import pytest

from craft_operator.reconciler.status_writer import dropped_fields

pytestmark = pytest.mark.unit


def test_fields_an_older_crd_pruned_are_named_with_their_path() -> None:
    written = {
        "phase": "Ready",
        "admittedImages": ["img@sha256:aa"],
        "workspace": {"phase": "Bound", "size": "5Gi"},
    }
    kept = {"phase": "Ready", "workspace": {"phase": "Bound"}}
    assert dropped_fields(written, kept) == ["status.admittedImages", "status.workspace.size"]


def test_fields_the_write_removed_are_not_taken_for_pruned() -> None:
    assert dropped_fields({"admittedImages": None, "phase": "Ready"}, {"phase": "Ready"}) == []
