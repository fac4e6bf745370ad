"""How the operator uses kopf: its handlers only watch, so kopf keeps no diff of objects."""

from __future__ import annotations

import threading
from pathlib import Path

import kopf
import pytest
from kopf._core.intents.causes import Activity

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

    # The cached kinds come from the operator's own streams; kopf watches at most the
    # peering object (a peered replica).
    assert list(registry._watching.get_all_handlers()) == []
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


async def test_the_login_reads_credentials_in_a_thread_and_configures_the_client_on_the_loop(
    tmp_path: Path,
) -> None:
    """A kubeconfig's exec plugin may take seconds: not on the event loop. The client's
    sessions and its ``connected`` Event belong to the loop: configured there."""
    loop_thread = threading.get_ident()
    read_in: list[int] = []

    def login(**_: object) -> kopf.ConnectionInfo:
        read_in.append(threading.get_ident())
        return kopf.ConnectionInfo(server="https://api.test:6443", token="t")

    context = build_context(Settings(state_dir=tmp_path, server_url="http://onyx.test:8080"))
    configured_in: list[int] = []
    configure = context.kube.configure

    def recording(info: kopf.ConnectionInfo) -> None:
        configured_in.append(threading.get_ident())
        configure(info)

    context.kube.configure = recording  # type: ignore[method-assign]
    registry = build_registry(context, login=login)
    [handler] = registry._activities.get_handlers(activity=Activity.AUTHENTICATION)

    info = await handler.fn()

    assert info is not None
    assert info.token == "t"
    assert read_in != [loop_thread]
    assert configured_in == [loop_thread]
    assert context.kube.connected.is_set()
