"""How the operator uses kopf: its handlers only watch, so kopf keeps no diff of objects."""

from __future__ import annotations

from pathlib import Path

import kopf
import pytest

from craft_operator.config import Settings
from craft_operator.runtime import WatchOnlyDiffBase, build_context, build_registry, configure_kopf

pytestmark = pytest.mark.unit

BODY = kopf.Body(
    {
        "apiVersion": "craft.onyx.app/v1alpha1",
        "kind": "CraftSandbox",
        "metadata": {"name": "alice", "namespace": "team-a", "labels": {"a": "b"}},
        "spec": {"user": {"id": "u-1"}},
    }
)


def test_every_resource_handler_only_watches(tmp_path: Path) -> None:
    context = build_context(Settings(state_dir=tmp_path, server_url="http://onyx.test:8080"))
    registry = build_registry(context, login=lambda **_: None)

    assert registry._watching.get_all_handlers()
    assert list(registry._changing.get_all_handlers()) == []
    assert list(registry._spawning.get_all_handlers()) == []
    assert list(registry._indexing.get_all_handlers()) == []


def test_kopf_builds_no_diff_of_the_objects_it_delivers() -> None:
    settings = kopf.OperatorSettings()
    configure_kopf(settings)
    storage = settings.persistence.diffbase_storage

    assert isinstance(storage, WatchOnlyDiffBase)
    assert storage.build(body=BODY) == {}
    assert storage.fetch(body=BODY) is None
