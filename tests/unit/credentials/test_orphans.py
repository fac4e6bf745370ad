"""Credential rows carry their cluster's id; the sweep's queries keep to that cluster.

Onyx's Postgres may be shared by the operators of several clusters: each must list,
revoke and adopt only its own rows. Runs on SQLite and on a throwaway Postgres.
"""

from __future__ import annotations

from collections.abc import Callable

import sqlalchemy as sa

from craft_operator.credentials import CredentialStore, SandboxIdentity
from craft_operator.credentials.orphans import (
    adopt_rows,
    count_without_cluster,
    revoke_orphan,
    rows_of_cluster,
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


def test_a_minted_row_carries_the_cluster_id_and_a_renewal_claims_an_old_row(
    make_store: StoreFactory, database: Database
) -> None:
    before_the_column = make_store(cluster_id=None)
    ours = make_store(cluster_id="east")
    who = identity("alice")
    user = database.new_user()
    before_the_column.ensure(who, user_id=user, tenant_id="public")
    assert cluster_of(database, "alice") is None

    ours.ensure(who, user_id=user, tenant_id="public", force_new=True)

    assert cluster_of(database, "alice") == "east"


def test_only_this_cluster_s_rows_are_listed_and_namespaces_narrow_them(
    make_store: StoreFactory, database: Database
) -> None:
    east, west, legacy = (
        make_store(cluster_id="east"),
        make_store(cluster_id="west"),
        make_store(cluster_id=None),
    )
    mint(east, database, identity("alice"))
    mint(east, database, identity("bob", namespace="team-b"))
    mint(west, database, identity("carol"))
    mint(legacy, database, identity("dave"))

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


def test_adopting_claims_only_rows_without_a_cluster_id(
    make_store: StoreFactory, database: Database
) -> None:
    west, legacy = make_store(cluster_id="west"), make_store(cluster_id=None)
    mint(west, database, identity("carol"))
    mint(legacy, database, identity("dave"))
    mint(legacy, database, identity("erin", namespace="team-b"))

    assert adopt_rows(legacy, "east", ["team-a"]) == 1
    assert adopt_rows(legacy, "east") == 1

    assert {row.name for row in rows_of_cluster(legacy, "east")} == {"dave", "erin"}
    assert cluster_of(database, "carol") == "west"
    assert count_without_cluster(legacy) == 0
