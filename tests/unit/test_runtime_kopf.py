"""How the operator uses kopf: its handlers only watch, so kopf keeps no diff of objects."""

from __future__ import annotations

import asyncio
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


def test_a_credentials_read_that_hangs_does_not_hold_the_processs_exit(tmp_path: Path) -> None:
    """A kubeconfig's exec plugin waiting for a login that never comes: once the operator
    stops, `craft-operator run`'s asyncio.Runner must not wait for the read's thread (it
    joins its default executor's threads without a limit)."""
    release = threading.Event()

    def hung_login(**_: object) -> kopf.ConnectionInfo | None:
        release.wait()
        return None

    async def main() -> None:
        context = build_context(Settings(state_dir=tmp_path, server_url="http://onyx.test:8080"))
        registry = build_registry(context, login=hung_login)
        [handler] = registry._activities.get_handlers(activity=Activity.AUTHENTICATION)
        with pytest.raises(TimeoutError):  # kopf cancels the login as the operator stops
            await asyncio.wait_for(handler.fn(), 0.2)

    def run() -> None:  # as `craft-operator run` does
        with asyncio.Runner() as runner:
            runner.run(main())

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(5.0)
    exited = not thread.is_alive()
    release.set()
    thread.join(5.0)
    assert exited, "the runner waited for the read's thread"
