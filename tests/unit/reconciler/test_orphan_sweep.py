"""The orphan sweep revokes a PAT only when its CraftSandbox is confirmed gone.

A real credential store (SQLite) and a stand-in for the API server's GET: the sweep must
revoke the PATs of deleted (or replaced) sandboxes, count them, name them by PAT id only,
and leave alone everything it cannot be sure of: live sandboxes, unreadable ones, other
clusters' rows, rows from before cluster ids, namespaces it does not serve, and every row
while the replica is a standby.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.abc
import itertools
import logging
import sys
import threading
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from prometheus_client import generate_latest

import craft_operator.credentials
from craft_operator.credentials import CredentialStore, KeyRing, SandboxIdentity, generate_key_entry
from craft_operator.credentials.db import create_credentials_engine, upgrade
from craft_operator.credentials.tables import PersonalAccessToken, SandboxCredential
from craft_operator.kube.cache import ObjectCache
from craft_operator.kube.client import ApiError, Kind, NotFoundError
from craft_operator.kube.kinds import SANDBOX as SANDBOX_KIND
from craft_operator.metrics import Metrics
from craft_operator.reconciler.orphan_sweep import OrphanSweeper
from craft_operator.reconciler.services import StoreCredentials
from tests.support.operator import eventually

CLUSTER = "east"


class ApiServer:
    """Answers GETs of CraftSandboxes from a dict; records every GET."""

    def __init__(self) -> None:
        self.sandboxes: dict[tuple[str, str], dict[str, Any]] = {}
        self.refuse: set[tuple[str, str]] = set()
        #: Answered with a 404 that does not name the object (a proxy's, say).
        self.anonymous_404: set[tuple[str, str]] = set()
        self.gets: list[tuple[str, str]] = []
        #: Namespaces deleted (every other one exists), and the namespace lists asked.
        self.gone_namespaces: set[str] = set()
        self.namespace_lists: list[str] = []

    def add(self, namespace: str, name: str, uid: str) -> dict[str, Any]:
        body = {"metadata": {"namespace": namespace, "name": name, "uid": uid}}
        self.sandboxes[(namespace, name)] = body
        return body

    async def get(self, kind: Kind, namespace: str | None, name: str) -> dict[str, Any]:
        key = (namespace or "", name)
        self.gets.append(key)
        if key in self.refuse:
            raise ApiError(403, "Forbidden", "no")
        if key in self.anonymous_404:
            raise NotFoundError(404, "NotFound", "the server could not find the requested resource")
        if key not in self.sandboxes:
            details = {"name": name, "group": "craft.onyx.app", "kind": "craftsandboxes"}
            raise NotFoundError(404, "NotFound", f'"{name}" not found', details)
        return self.sandboxes[key]

    async def list(
        self, kind: Kind, namespace: str | None, *, label_selector: str | None = None
    ) -> list[dict[str, Any]]:
        assert kind.plural == "namespaces"
        assert label_selector is not None
        label, _, name = label_selector.partition("=")
        assert label == "kubernetes.io/metadata.name"
        self.namespace_lists.append(name)
        return [] if name in self.gone_namespaces else [{"metadata": {"name": name}}]


class World:
    """One database shared by this cluster's operator and, optionally, others."""

    def __init__(self, tmp_path: Path) -> None:
        self.engine = create_credentials_engine(f"sqlite:///{tmp_path / 'credentials.db'}")
        upgrade(self.engine)
        self.keyring = KeyRing.parse(generate_key_entry("k1").get_secret_value())
        self.stores: list[CredentialStore] = []
        self.api = ApiServer()
        self.cache = ObjectCache()
        self.metrics = Metrics()
        self.active = True
        self.namespaces: tuple[str, ...] = ()
        self.store = self.store_of(CLUSTER)
        self.sweeper = OrphanSweeper(
            credentials=StoreCredentials(self.store),
            kube=self.api,
            cache=self.cache,
            metrics=self.metrics,
            cluster_id=CLUSTER,
            interval=60,
            active=lambda: self.active,
            namespaces=lambda: self.namespaces,
            sync_poll=0.01,
        )

    def store_of(self, cluster_id: str) -> CredentialStore:
        store = CredentialStore(self.engine, self.keyring, cluster_id=cluster_id)
        self.stores.append(store)
        return store

    def forget_cluster(self, pat_id: int) -> None:
        """Make the row of ``pat_id`` one written before cluster ids were recorded."""
        with self.engine.begin() as connection:
            connection.execute(
                sa.update(SandboxCredential)
                .where(SandboxCredential.pat_id == pat_id)
                .values(cluster_id=None)
            )

    def pat_live(self, pat_id: int) -> bool:
        with self.engine.connect() as connection:
            revoked = connection.execute(
                sa.select(PersonalAccessToken.is_revoked).where(PersonalAccessToken.id == pat_id)
            ).scalar_one()
        return not revoked

    def mint(
        self, name: str, *, namespace: str = "team-a", store: CredentialStore | None = None
    ) -> tuple[str, int]:
        uid = str(uuid.uuid4())
        issued = (store or self.store).ensure(
            SandboxIdentity(namespace, name, uid), user_id=uuid.uuid4(), tenant_id="public"
        )
        return uid, issued.pat_id

    def live(self, name: str, namespace: str = "team-a") -> bool:
        info = self.store.show(namespace, name)
        return info is not None and info.pat_state.value == "live"

    def revoked_metric(self) -> float:
        text = generate_latest(self.metrics.registry).decode()
        line = next(
            line
            for line in text.splitlines()
            if line.startswith("craft_orphaned_pats_revoked_total ")
        )
        return float(line.split()[-1])


@pytest.fixture
def world(tmp_path: Path) -> World:
    return World(tmp_path)


@contextlib.asynccontextmanager
async def running(sweeper: OrphanSweeper) -> AsyncIterator[None]:
    """The sweeper's loop, as the operator runs it, for one life of the process."""
    task = asyncio.create_task(sweeper.run())
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_the_pat_of_a_deleted_sandbox_is_revoked_counted_and_logged_by_id(
    world: World, caplog: pytest.LogCaptureFixture
) -> None:
    _, pat_id = world.mint("gone")
    caplog.set_level(logging.INFO)

    report = await world.sweeper.tick()

    assert report is not None
    assert report.revoked == (pat_id,)
    assert world.store.show("team-a", "gone") is None
    assert world.revoked_metric() == 1
    assert f"revoked PAT {pat_id} of sandbox team-a/gone" in caplog.text
    assert "onyx_pat_" not in caplog.text.lower()


async def test_an_orphan_whose_pat_onyx_deleted_is_forgotten_and_not_said_or_counted_revoked(
    world: World, caplog: pytest.LogCaptureFixture
) -> None:
    """On-call reads the log and craft_orphaned_pats_revoked: a PAT that was no longer in
    Onyx was not revoked, only its stored row forgotten."""
    uid, pat_id = world.mint("gone")
    with world.engine.begin() as connection:  # deleted in Onyx
        connection.execute(sa.delete(PersonalAccessToken).where(PersonalAccessToken.id == pat_id))
    caplog.set_level(logging.INFO)

    report = await world.sweeper.tick()

    assert report is not None
    assert report.revoked == ()
    assert world.store.show("team-a", "gone") is None
    assert world.revoked_metric() == 0
    assert f"revoked PAT {pat_id}" not in caplog.text
    assert (
        f"forgot the credential of sandbox team-a/gone (uid {uid}), "
        f"which no longer exists; nothing was revoked: PAT {pat_id} is not in Onyx"
    ) in caplog.text


async def test_a_sandbox_replaced_by_one_with_another_uid_is_an_orphan(world: World) -> None:
    world.mint("alice")
    world.api.add("team-a", "alice", uid="someone-else")

    report = await world.sweeper.tick()

    assert report is not None
    assert len(report.revoked) == 1
    assert world.store.show("team-a", "alice") is None


async def test_a_live_sandbox_is_kept_and_one_in_the_cache_costs_no_api_call(
    world: World,
) -> None:
    cached_uid, _ = world.mint("cached")
    world.cache.put(SANDBOX_KIND.name, world.api.add("team-a", "cached", cached_uid))
    listed_uid, _ = world.mint("not-yet-cached")
    world.api.add("team-a", "not-yet-cached", listed_uid)

    report = await world.sweeper.tick()

    assert report is not None
    assert report.revoked == ()
    assert world.live("cached")
    assert world.live("not-yet-cached")
    assert world.api.gets == [("team-a", "not-yet-cached")]


async def test_a_sandbox_the_api_will_not_show_is_left_for_the_next_sweep(world: World) -> None:
    world.mint("hidden")
    world.api.refuse.add(("team-a", "hidden"))

    report = await world.sweeper.tick()

    assert report is not None
    assert (report.revoked, report.unconfirmed) == ((), 1)
    assert world.live("hidden")


async def test_a_404_that_does_not_name_the_sandbox_revokes_nothing(
    world: World, caplog: pytest.LogCaptureFixture
) -> None:
    world.mint("behind-a-proxy")
    world.api.anonymous_404.add(("team-a", "behind-a-proxy"))

    report = await world.sweeper.tick()

    assert report is not None
    assert (report.revoked, report.unconfirmed) == ((), 1)
    assert world.live("behind-a-proxy")
    assert "does not name it" in caplog.text


async def test_a_row_whose_revocation_fails_does_not_stop_the_sweep(
    world: World, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from craft_operator.credentials import orphans
    from craft_operator.credentials.errors import CredentialsError

    first_pat = world.mint("first")[1]
    world.mint("second")
    world.mint("third")
    real = orphans.revoke_orphan

    def failing_first(store: CredentialStore, row: orphans.StoredCredential) -> bool:
        if row.name == "first":
            raise CredentialsError("the database refused the write")
        return real(store, row)

    monkeypatch.setattr(orphans, "revoke_orphan", failing_first)

    report = await world.sweeper.tick()

    assert report is not None
    assert (len(report.revoked), report.failed) == (2, 1)
    assert world.live("first")
    assert not world.live("second")
    assert not world.live("third")
    assert f"PAT {first_pat} of sandbox team-a/first left for the next sweep" in caplog.text


async def test_an_orphan_s_library_record_goes_with_its_row(world: World) -> None:
    from craft_operator.credentials import library_records
    from craft_operator.library.record import SyncRecord

    uid, _ = world.mint("gone")
    record = SyncRecord(pod_uid="pod-1", entries={}, lines=0, digests=())
    library_records.save_record(
        world.engine, sandbox_uid=uid, namespace="team-a", name="gone", record=record
    )

    await world.sweeper.tick()

    assert library_records.load_record(world.engine, uid) is None


async def test_other_clusters_rows_and_rows_without_a_cluster_id_are_never_swept(
    world: World, caplog: pytest.LogCaptureFixture
) -> None:
    _, theirs = world.mint("theirs", store=world.store_of("west"))
    _, old = world.mint("from-before-cluster-ids", store=world.store_of("west"))
    world.forget_cluster(old)

    report = await world.sweeper.tick()

    assert report is not None
    assert (report.checked, report.revoked, report.without_cluster) == (0, (), 1)
    assert world.pat_live(theirs)
    assert world.pat_live(old)
    assert world.api.gets == []
    assert "1 credential rows have no cluster id" in caplog.text


async def test_a_sandbox_deleted_in_this_cluster_leaves_another_cluster_s_namesake_alone(
    world: World,
) -> None:
    # Both clusters have a sandbox team-a/x; this cluster's was deleted, the other's lives.
    _, ours = world.mint("x")
    west_uid, theirs = world.mint("x", store=world.store_of("west"))

    report = await world.sweeper.tick()

    assert report is not None
    assert report.revoked == (ours,)
    assert not world.pat_live(ours)
    assert world.pat_live(theirs)
    info = world.store_of("west").show("team-a", "x")
    assert info is not None
    assert (info.sandbox_uid, info.pat_id) == (west_uid, theirs)


async def test_namespaces_this_operator_does_not_serve_are_left_alone(world: World) -> None:
    world.mint("elsewhere", namespace="team-b")
    world.namespaces = ("team-a",)

    report = await world.sweeper.tick()

    assert report is not None
    assert report.checked == 0
    assert world.live("elsewhere", namespace="team-b")
    assert world.api.gets == [], "another operator's namespace: its sandboxes are not read"


async def test_a_row_in_a_served_namespace_that_no_longer_exists_is_an_orphan(
    world: World,
) -> None:
    """Deleted with its sandboxes in it: the Role that let the operator read them went
    with it (403), and their finalizers were removed by hand."""
    _, pat_id = world.mint("torn-down", namespace="team-z")
    world.namespaces = ("team-a", "team-z")
    world.api.refuse.add(("team-z", "torn-down"))
    world.api.gone_namespaces.add("team-z")

    report = await world.sweeper.tick()

    assert report is not None
    assert report.revoked == (pat_id,)
    assert not world.pat_live(pat_id)


async def test_a_sandbox_the_cache_still_holds_while_its_watch_fails_is_asked_for_live(
    world: World,
) -> None:
    """The namespace's watch failed first (its Role pruned before it, say): the cache keeps
    what it saw last, and the namespace's deletion never reaches it."""
    uid, pat_id = world.mint("torn-down", namespace="team-z")
    world.namespaces = ("team-a", "team-z")
    world.cache.put(
        "CraftSandbox", {"metadata": {"namespace": "team-z", "name": "torn-down", "uid": uid}}
    )
    world.cache.put("Namespace", {"metadata": {"name": "team-z"}})
    world.cache.mark_stale("CraftSandbox", "team-z", True)
    world.cache.mark_stale("Namespace", None, True)
    world.api.refuse.add(("team-z", "torn-down"))
    world.api.gone_namespaces.add("team-z")

    report = await world.sweeper.tick()

    assert report is not None
    assert report.revoked == (pat_id,)
    assert not world.pat_live(pat_id)


async def test_a_row_in_a_namespace_being_deleted_waits_until_it_is_gone(world: World) -> None:
    _, pat_id = world.mint("torn-down", namespace="team-z")
    world.namespaces = ("team-z",)
    world.api.refuse.add(("team-z", "torn-down"))  # still there, its Role gone

    report = await world.sweeper.tick()

    assert report is not None
    assert (report.revoked, report.unconfirmed) == ((), 1)
    assert world.pat_live(pat_id)


async def test_a_namespace_no_longer_served_is_never_swept_even_if_it_does_not_exist(
    world: World,
) -> None:
    """Its rows may be another cluster's that shares this cluster id by mistake (a rebuilt
    cluster kept up beside the old one): a namespace this cluster lacks proves nothing
    there. A restart leaves a served namespace that is being deleted, or gone, out of its
    watches, not out of its sweep."""
    _, pat_id = world.mint("elsewhere", namespace="team-z")
    world.namespaces = ("team-a",)
    world.api.gone_namespaces.add("team-z")

    report = await world.sweeper.tick()

    assert report is not None
    assert report.checked == 0
    assert world.pat_live(pat_id)
    assert world.api.namespace_lists == []


async def test_a_namespace_the_cache_holds_is_not_asked_for(world: World) -> None:
    world.mint("hidden")
    world.api.refuse.add(("team-a", "hidden"))
    world.cache.put("Namespace", {"metadata": {"name": "team-a"}})

    report = await world.sweeper.tick()

    assert report is not None
    assert report.unconfirmed == 1
    assert world.api.namespace_lists == []


async def test_a_standby_or_an_unprimed_replica_sweeps_nothing(world: World) -> None:
    world.mint("gone")
    world.active = False

    assert await world.sweeper.tick() is None

    assert world.live("gone")
    assert world.api.gets == []


async def test_a_replica_that_stands_by_during_a_sweep_stops_sweeping(world: World) -> None:
    for index in range(3):
        world.mint(f"gone-{index}")
    real_get = world.api.get

    async def standing_by_after_the_first(kind: Kind, namespace: str | None, name: str) -> Any:
        world.active = False  # the peer took over while this GET was under way
        return await real_get(kind, namespace, name)

    world.api.get = standing_by_after_the_first  # type: ignore[method-assign]

    await world.sweeper.tick()
    assert len(world.api.gets) == 1, "no GET per row left once standing by"


async def test_without_a_cluster_id_the_sweep_does_not_run(
    world: World, caplog: pytest.LogCaptureFixture
) -> None:
    world.mint("gone")
    world.sweeper.cluster_id = None

    await world.sweeper.run()  # returns at once

    assert world.live("gone")
    assert "orphan sweep off: set CRAFT_CLUSTER_ID" in caplog.text


async def test_an_operator_restarted_more_often_than_the_interval_sweeps_at_each_start(
    world: World,
) -> None:
    world.sweeper.interval = 60  # every life below is far shorter
    for life in range(2):
        name = f"gone-before-start-{life}"
        world.mint(name)
        world.active = False  # a new process: its cache is not filled yet
        world.api.gets.clear()
        async with running(world.sweeper):
            await asyncio.sleep(0.1)
            assert world.live(name), "swept with an unfilled cache"
            assert world.api.gets == []

            world.active = True  # the first listing is in
            await eventually(lambda n=name: not world.live(n), within=2, what="swept")


async def test_a_standby_that_takes_over_sweeps_once_its_cache_is_filled(world: World) -> None:
    world.sweeper.interval = 1.0
    world.active = False
    world.mint("gone")
    async with running(world.sweeper):
        await asyncio.sleep(1.2)  # a sweep fell due while it stood by
        assert world.live("gone")

        world.active = True  # took over, its listing is in
        await eventually(lambda: not world.live("gone"), within=0.3, what="swept at once")


async def test_in_steady_state_it_sweeps_once_per_interval(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    world.sweeper.interval = 0.2
    loop = asyncio.get_running_loop()
    sweeps: list[float] = []
    real_sweep = world.sweeper.sweep_once

    async def counted() -> Any:
        sweeps.append(loop.time())
        return await real_sweep()

    monkeypatch.setattr(world.sweeper, "sweep_once", counted)
    started = loop.time()
    async with running(world.sweeper):
        await asyncio.sleep(0.9)

    assert sweeps[0] - started < 0.1, "the first sweep waits for nothing but the cache"
    assert len(sweeps) >= 3, "it keeps sweeping"
    assert all(later - earlier >= 0.2 for earlier, later in itertools.pairwise(sweeps))


class _ImportWatcher(importlib.abc.MetaPathFinder):
    """Records the thread that imports each watched module (and lets the import go on)."""

    def __init__(self, names: set[str]) -> None:
        self.names = names
        self.threads: list[str] = []

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> None:
        if fullname in self.names:
            self.threads.append(threading.current_thread().name)


async def test_the_sweep_imports_the_database_side_in_the_database_thread_only(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """At start, the sweep and the store's opening run at once: importing SQLAlchemy's
    modules in the event loop's thread beside the opening's thread left one half made, and
    every database call of the process failed from then on."""
    world.mint("gone")
    name = "craft_operator.credentials.orphans"
    monkeypatch.delitem(sys.modules, name, raising=False)
    monkeypatch.delattr(craft_operator.credentials, "orphans", raising=False)
    watcher = _ImportWatcher({name})
    monkeypatch.setattr(sys, "meta_path", [watcher, *sys.meta_path])

    report = await world.sweeper.tick()

    assert report is not None
    assert watcher.threads
    assert threading.main_thread().name not in watcher.threads
