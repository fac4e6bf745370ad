"""Two clusters sharing one database never touch each other's credential rows or PATs.

Onyx's Postgres may serve the operators of several clusters, each with a sandbox of the
same namespace and name. Each cluster keeps its own row (keyed by its cluster id) and its
own PAT through mint, renewal, revocation, key rotation and show. Rows from before
cluster ids are claimed only on proof: the sandbox's uid, and a token this key ring opens
for that uid. Runs on SQLite and on a throwaway Postgres.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

import sqlalchemy as sa

from craft_operator.credentials import CredentialStore, KeyRing, SandboxIdentity, generate_key_entry
from craft_operator.credentials.tables import PersonalAccessToken, SandboxCredential

from .conftest import Clock, Database

StoreFactory = Callable[..., CredentialStore]
LIFETIME = timedelta(hours=10)
EAST_X = SandboxIdentity("craft-sandboxes", "x", "uid-east-x")
WEST_X = SandboxIdentity("craft-sandboxes", "x", "uid-west-x")


def live(database: Database, pat_id: int) -> bool:
    with database.engine.connect() as connection:
        revoked = connection.execute(
            sa.select(PersonalAccessToken.is_revoked).where(PersonalAccessToken.id == pat_id)
        ).scalar_one()
    return not revoked


def forget_clusters(database: Database) -> None:
    """Make every row one written before cluster ids were recorded."""
    with database.engine.begin() as connection:
        connection.execute(sa.update(SandboxCredential).values(cluster_id=None))


def test_the_same_sandbox_name_in_two_clusters_gets_two_rows_and_two_live_pats(
    make_store: StoreFactory, database: Database
) -> None:
    east, west = make_store(cluster_id="east"), make_store(cluster_id="west")
    user = database.new_user()
    first_east = east.ensure(EAST_X, user_id=user, tenant_id="public", lifetime=LIFETIME)
    first_west = west.ensure(WEST_X, user_id=user, tenant_id="public", lifetime=LIFETIME)

    again_east = east.ensure(EAST_X, user_id=user, tenant_id="public", lifetime=LIFETIME)
    again_west = west.ensure(WEST_X, user_id=user, tenant_id="public", lifetime=LIFETIME)

    assert first_west.superseded_pat_id is None
    assert (again_east.minted, again_east.pat_id) == (False, first_east.pat_id)
    assert (again_west.minted, again_west.pat_id) == (False, first_west.pat_id)
    assert live(database, first_east.pat_id)
    assert live(database, first_west.pat_id)
    east_info, west_info = east.show("craft-sandboxes", "x"), west.show("craft-sandboxes", "x")
    assert east_info is not None
    assert west_info is not None
    assert (east_info.sandbox_uid, west_info.sandbox_uid) == ("uid-east-x", "uid-west-x")


def test_a_renewal_in_one_cluster_leaves_the_other_s_pat_live(
    make_store: StoreFactory, database: Database, clock: Clock
) -> None:
    east, west = make_store(cluster_id="east"), make_store(cluster_id="west")
    user = database.new_user()
    west_pat = west.ensure(WEST_X, user_id=user, tenant_id="public", lifetime=LIFETIME).pat_id
    clock.advance(timedelta(hours=5))
    east_pat = east.ensure(EAST_X, user_id=user, tenant_id="public", lifetime=LIFETIME).pat_id
    clock.advance(timedelta(hours=4, minutes=30))  # west's PAT is in its renewal window

    renewed = west.ensure(WEST_X, user_id=user, tenant_id="public", lifetime=LIFETIME)
    reused = east.ensure(EAST_X, user_id=user, tenant_id="public", lifetime=LIFETIME)

    assert (renewed.minted, renewed.superseded_pat_id) == (True, west_pat)
    assert (reused.minted, reused.pat_id) == (False, east_pat)
    assert live(database, east_pat)


def test_deleting_a_sandbox_in_one_cluster_revokes_only_that_cluster_s_pat(
    make_store: StoreFactory, database: Database
) -> None:
    east, west = make_store(cluster_id="east"), make_store(cluster_id="west")
    user = database.new_user()
    east_pat = east.ensure(EAST_X, user_id=user, tenant_id="public").pat_id
    west_pat = west.ensure(WEST_X, user_id=user, tenant_id="public").pat_id

    assert east.revoke(EAST_X)
    assert east.revoke_named("craft-sandboxes", "x") is None

    assert not live(database, east_pat)
    assert live(database, west_pat)
    again = west.ensure(WEST_X, user_id=user, tenant_id="public")
    assert (again.minted, again.pat_id) == (False, west_pat)


def test_a_key_rotation_re_encrypts_only_this_cluster_s_rows(
    make_store: StoreFactory, database: Database, keyring: KeyRing, key_entry: str
) -> None:
    east, west = make_store(cluster_id="east"), make_store(cluster_id="west")
    user = database.new_user()
    east.ensure(EAST_X, user_id=user, tenant_id="public")
    west_pat = west.ensure(WEST_X, user_id=user, tenant_id="public").pat_id
    rotated = make_store(
        KeyRing.parse(f"{generate_key_entry('k2').get_secret_value()},{key_entry}"),
        cluster_id="east",
    )

    assert rotated.rotate().changed == 1

    assert rotated.key_ids_in_use() == {"k2": 1}
    assert west.key_ids_in_use() == {"k1": 1}
    again = west.ensure(WEST_X, user_id=user, tenant_id="public")
    assert (again.minted, again.pat_id) == (False, west_pat)


def test_an_upgraded_install_claims_its_rows_from_before_cluster_ids_and_keeps_the_pats(
    make_store: StoreFactory, database: Database
) -> None:
    user = database.new_user()
    before = make_store(cluster_id="east").ensure(EAST_X, user_id=user, tenant_id="public")
    forget_clusters(database)
    upgraded = make_store(cluster_id="east")

    issued = upgraded.ensure(EAST_X, user_id=user, tenant_id="public")

    assert (issued.minted, issued.pat_id) == (False, before.pat_id)
    info = upgraded.show("craft-sandboxes", "x")
    assert info is not None
    assert info.pat_id == before.pat_id


def test_a_row_from_before_cluster_ids_of_another_sandbox_is_neither_reused_nor_revoked(
    make_store: StoreFactory, database: Database
) -> None:
    user = database.new_user()
    theirs = make_store(cluster_id="west").ensure(WEST_X, user_id=user, tenant_id="public")
    forget_clusters(database)
    east = make_store(cluster_id="east")

    ours = east.ensure(EAST_X, user_id=user, tenant_id="public")
    assert not east.revoke(SandboxIdentity("craft-sandboxes", "y", "uid-east-y"))
    assert east.revoke(EAST_X)

    assert ours.minted
    assert ours.superseded_pat_id is None
    assert live(database, theirs.pat_id)
    assert not live(database, ours.pat_id)


def test_a_row_from_before_cluster_ids_this_key_ring_cannot_open_is_left_alone(
    make_store: StoreFactory, database: Database
) -> None:
    # Another cluster with the same sandbox uid (restored from the same etcd backup) but
    # its own key ring wrote the row: it is not this cluster's to reuse or revoke.
    user = database.new_user()
    other_ring = KeyRing.parse(generate_key_entry("other").get_secret_value())
    theirs = make_store(other_ring, cluster_id="west").ensure(
        EAST_X, user_id=user, tenant_id="public"
    )
    forget_clusters(database)
    east = make_store(cluster_id="east")

    ours = east.ensure(EAST_X, user_id=user, tenant_id="public")
    east.revoke(EAST_X)

    assert ours.minted
    assert ours.superseded_pat_id is None
    assert live(database, theirs.pat_id)


def test_the_finalizer_revokes_this_sandbox_s_row_from_before_cluster_ids(
    make_store: StoreFactory, database: Database
) -> None:
    user = database.new_user()
    before = make_store(cluster_id="east").ensure(EAST_X, user_id=user, tenant_id="public")
    forget_clusters(database)

    assert make_store(cluster_id="east").revoke(EAST_X)

    assert not live(database, before.pat_id)
    assert database.live_pats() == 0
