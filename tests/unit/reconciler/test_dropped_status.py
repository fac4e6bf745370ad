"""What the status writers notice in the API server's answer to their write: the fields an
older CRD drops, which later patches leave out."""

from __future__ import annotations

import pytest

from craft_operator.reconciler.dropped_status import dropped_fields, without

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


def test_a_patch_leaves_out_the_fields_known_dropped_and_what_held_only_them() -> None:
    patch = {"selector": "p=x", "ready": 2, "workspace": {"size": "5Gi"}}
    assert without(patch, ["status.selector", "status.workspace.size"]) == {"ready": 2}
    assert without(patch, ["status.workspace.phase", "status.ready.x"]) == patch
    assert without({"selector": "p=x"}, ["status.selector"]) == {}
