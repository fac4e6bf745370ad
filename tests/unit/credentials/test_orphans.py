"""Credential rows carry their cluster's id; the sweep's queries keep to that cluster.

Onyx's Postgres may be shared by the operators of several clusters: each must list,
revoke and adopt only its own rows. Runs on SQLite and on a throwaway Postgres.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import pytest
import sqlalchemy as sa

from craft_operator.credentials import CredentialStore, SandboxIdentity
from craft_operator.credentials.orphans import (
    adopt_rows,
    count_without_cluster,
    revoke_orphan,
    rows_of_cluster,
    unclaimed_rows,
)
from craft_operator.credentials.tables import SandboxCredential

from .conftest import Database

StoreFactory = Callable[..., CredentialStore]


def identity(name: str, namespace: str = "team-a", uid: str | None = None) -> SandboxIdentity:
    return SandboxIdentity(namespace, name, uid or f"uid-{namespace}-{name}")


def mint(store: CredentialStore, database: Database, who: SandboxIdentity) -> int:
    issued = store.ensure(who, user_id=database.new_user(), tenant_id="public")
    return issued.pat_id


def cluster_of(database: Database, name: str) -> str | None:
    table = SandboxCredential.__table__
    with database.engine.connect() as connection:
        return connection.execute(
            sa.select(table.c.cluster_id).where(table.c.name == name)
        ).scalar_one()


def forget_cluster(database: Database, name: str) -> None:
    """Make the row of ``name`` one written before cluster ids were recorded."""
    table = SandboxCredential.__table__
    with database.engine.begin() as connection:
        connection.execute(sa.update(table).where(table.c.name == name).values(cluster_id=None))


def test_a_minted_row_carries_the_cluster_id(make_store: StoreFactory, database: Database) -> None:
    mint(make_store(cluster_id="east"), database, identity("alice"))

    assert cluster_of(database, "alice") == "east"


def test_only_this_cluster_s_rows_are_listed_and_namespaces_narrow_them(
    make_store: StoreFactory, database: Database
) -> None:
    east, west = make_store(cluster_id="east"), make_store(cluster_id="west")
    mint(east, database, identity("alice"))
    mint(east, database, identity("bob", namespace="team-b"))
    mint(west, database, identity("carol"))
    mint(west, database, identity("dave"))
    forget_cluster(database, "dave")

    assert {row.name for row in rows_of_cluster(east, "east")} == {"alice", "bob"}
    assert {row.name for row in rows_of_cluster(east, "east", ["team-b"])} == {"bob"}
    assert {row.name for row in rows_of_cluster(west, "west")} == {"carol"}
    assert count_without_cluster(east) == 1


def test_revoking_an_orphan_revokes_its_pat_and_deletes_its_row(
    make_store: StoreFactory, database: Database
) -> None:
    store = make_store(cluster_id="east")
    mint(store, database, identity("alice"))
    [row] = rows_of_cluster(store, "east")

    assert revoke_orphan(store, row)

    assert database.live_pats() == 0
    assert store.show("team-a", "alice") is None


def test_a_row_re_minted_for_a_new_sandbox_since_it_was_listed_is_not_revoked(
    make_store: StoreFactory, database: Database
) -> None:
    store = make_store(cluster_id="east")
    user = database.new_user()
    store.ensure(identity("alice", uid="old"), user_id=user, tenant_id="public")
    [listed] = rows_of_cluster(store, "east")
    # A new sandbox of the same name is created and reconciled before the sweep acts.
    fresh = store.ensure(identity("alice", uid="new"), user_id=user, tenant_id="public")

    assert not revoke_orphan(store, listed)

    assert database.live_pats() == 1
    info = store.show("team-a", "alice")
    assert info is not None
    assert (info.sandbox_uid, info.pat_id) == ("new", fresh.pat_id)


def test_adopting_claims_only_rows_whose_sandbox_exists_here_with_the_row_s_uid(
    make_store: StoreFactory, database: Database
) -> None:
    east, west = make_store(cluster_id="east"), make_store(cluster_id="west")
    mint(west, database, identity("carol"))  # west's own row: never a candidate
    for name in ("dave", "erin", "frank", "gina"):
        mint(west, database, identity(name))
        forget_cluster(database, name)
    # This cluster has dave (same uid: its row) and erin under another uid (another
    # cluster's erin, or an earlier one); frank and gina do not exist here.
    here = {
        ("team-a", "dave"): "uid-team-a-dave",
        ("team-a", "erin"): "uid-of-this-cluster-s-erin",
    }
    rows = unclaimed_rows(east)

    would = adopt_rows(east, rows, here, dry_run=True)
    assert count_without_cluster(east) == 4
    adopted = adopt_rows(east, rows, here)

    assert [row.name for row in would] == [row.name for row in adopted] == ["dave"]
    assert {row.name for row in rows_of_cluster(east, "east")} == {"dave"}
    assert cluster_of(database, "carol") == "west"
    assert {row.name for row in unclaimed_rows(east)} == {"erin", "frank", "gina"}
    assert adopt_rows(east, rows, here) == []  # already adopted: nothing changes
    assert database.live_pats() == 5


def test_adopting_leaves_a_row_whose_name_this_cluster_already_has(
    make_store: StoreFactory, database: Database
) -> None:
    east, west = make_store(cluster_id="east"), make_store(cluster_id="west")
    mint(west, database, identity("dave"))
    forget_cluster(database, "dave")
    mint(east, database, identity("dave", uid="uid-team-a-dave-new"))

    assert adopt_rows(east, unclaimed_rows(east), {("team-a", "dave"): "uid-team-a-dave"}) == []

    assert count_without_cluster(east) == 1


def test_adopting_leaves_a_row_whose_name_this_cluster_writes_meanwhile_and_adopts_the_rest(
    make_store: StoreFactory, database: Database
) -> None:
    """This cluster's operator writes its own row of that name (a PAT of its own for the
    sandbox) after the command checked there was none: a lost race, not a database error
    that undoes every row's adoption."""
    if not database.onyx_mode:
        pytest.skip("SQLite has one writer at a time: no write comes between check and claim")
    east, west = make_store(cluster_id="east"), make_store(cluster_id="west")
    for name in ("dave", "erin"):
        mint(west, database, identity(name))
        forget_cluster(database, name)
    rows = unclaimed_rows(east)
    here = {(row.namespace, row.name): row.sandbox_uid for row in rows}
    table = SandboxCredential.__table__
    columns = [column for column in table.c if column.name != "id"]
    east_dave = sa.select(
        *(sa.literal("east") if c.name == "cluster_id" else c for c in columns)
    ).where(table.c.name == "dave")

    with database.engine.connect() as operator:
        written = operator.begin()
        operator.execute(sa.insert(table).from_select([c.name for c in columns], east_dave))
        with ThreadPoolExecutor(1) as pool:
            adopting = pool.submit(adopt_rows, east, rows, here)
            waiting_on_the_write(database)
            written.commit()
            adopted = adopting.result(timeout=30)

    assert [row.name for row in adopted] == ["erin"]
    assert {row.name for row in unclaimed_rows(east)} == {"dave"}
    assert sorted(row.name for row in rows_of_cluster(east, "east")) == ["dave", "erin"]


def waiting_on_the_write(database: Database) -> None:
    """Wait until a session waits on another's lock (the claim on the uncommitted row)."""
    waiting = sa.text("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'")
    deadline = time.monotonic() + 10
    with database.engine.connect() as connection:
        while not connection.execute(waiting).scalar_one():
            connection.rollback()  # a transaction sees one snapshot of pg_stat_activity
            assert time.monotonic() < deadline, "the claim never waited on the write"
            time.sleep(0.02)
