"""Two clusters sharing one database never touch each other's credential rows or PATs.

Onyx's Postgres may serve the operators of several clusters, each with a sandbox of the
same namespace and name. Each cluster keeps its own row (keyed by its cluster id) and its
own PAT through mint, renewal, revocation, key rotation and show. Rows from before
cluster ids are claimed only on proof: the sandbox's uid, and a token this key ring opens
for that uid; one sealed under a key id the ring lacks is neither claimed nor replaced.
Runs on SQLite and on a throwaway Postgres.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa

from craft_operator.credentials import (
    CredentialStore,
    IssuedCredential,
    KeyRing,
    SandboxIdentity,
    generate_key_entry,
)
from craft_operator.credentials.errors import KeyNotInRingError
from craft_operator.credentials.keyring import RELOAD_INTERVAL, key_ring_from_file
from craft_operator.credentials.orphans import adopt_rows, unclaimed_rows
from craft_operator.credentials.tables import PersonalAccessToken, SandboxCredential
from craft_operator.reconciler.steps.credentials import failure_reason

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


def test_a_row_from_before_cluster_ids_failing_authentication_under_this_ring_is_left_alone(
    make_store: StoreFactory, database: Database
) -> None:
    # Another cluster with the same sandbox uid (restored from the same etcd backup) but
    # its own key ring, whose key has this ring's key id, wrote the row: it is not this
    # cluster's to reuse or revoke.
    user = database.new_user()
    other_ring = KeyRing.parse(generate_key_entry("k1").get_secret_value())
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


def stored_rows(database: Database) -> list[tuple[str | None, bytes]]:
    """The cluster id and sealed token of every credential row."""
    table = SandboxCredential.__table__
    with database.engine.connect() as connection:
        rows = connection.execute(sa.select(table.c.cluster_id, table.c.encrypted_token))
        return [(row.cluster_id, row.encrypted_token) for row in rows]


def test_a_row_from_before_cluster_ids_under_a_key_the_ring_lacks_is_neither_claimed_nor_replaced(
    make_store: StoreFactory, database: Database
) -> None:
    user = database.new_user()
    before = make_store(cluster_id="east").ensure(EAST_X, user_id=user, tenant_id="public")
    forget_clusters(database)
    rows = stored_rows(database)
    east = make_store(KeyRing.parse(generate_key_entry("k2").get_secret_value()), cluster_id="east")

    def ensure() -> IssuedCredential:
        return east.ensure(EAST_X, user_id=user, tenant_id="public")

    def finalize() -> bool:
        return east.revoke(EAST_X)

    for attempt in (ensure, ensure, finalize):  # every retry, and the finalizer, say the same
        with pytest.raises(KeyNotInRingError) as caught:
            attempt()
        assert failure_reason(caught.value) == "KeyNotInRing"
        assert (caught.value.key_id, caught.value.ring_key_ids) == ("k1", ("k2",))
        assert "put key 'k1' back in the key ring" in str(caught.value)
        assert (
            "craft-operator credentials adopt --namespace craft-sandboxes, then: "
            "craft-operator credentials revoke craft-sandboxes/x"
        ) in str(caught.value)

    assert live(database, before.pat_id)
    assert database.live_pats() == 1
    assert stored_rows(database) == rows

    # The way out it names: adopt the row, then revoke it for a new PAT.
    adopt_rows(east, unclaimed_rows(east), {("craft-sandboxes", "x"): EAST_X.uid})
    assert east.revoke_named("craft-sandboxes", "x") is not None
    assert ensure().minted
    assert not live(database, before.pat_id)
    assert database.live_pats() == 1


def test_a_row_from_before_cluster_ids_is_claimed_once_the_key_ring_file_gains_its_key(
    make_store: StoreFactory, database: Database, tmp_path: Path, key_entry: str
) -> None:
    user = database.new_user()
    before = make_store(cluster_id="east").ensure(EAST_X, user_id=user, tenant_id="public")
    forget_clusters(database)
    k2 = generate_key_entry("k2").get_secret_value()
    path, now = tmp_path / "keys", [1000.0]
    path.write_text(k2, encoding="utf-8")
    east = make_store(key_ring_from_file(path, monotonic=lambda: now[0]), cluster_id="east")
    path.write_text(f"{k2}\n{key_entry}", encoding="utf-8")  # the Secret volume catches up
    now[0] += RELOAD_INTERVAL

    issued = east.ensure(EAST_X, user_id=user, tenant_id="public")

    assert (issued.minted, issued.pat_id) == (False, before.pat_id)
    assert [cluster for cluster, _ in stored_rows(database)] == ["east"]


def test_the_finalizer_revokes_this_sandbox_s_row_from_before_cluster_ids(
    make_store: StoreFactory, database: Database
) -> None:
    user = database.new_user()
    before = make_store(cluster_id="east").ensure(EAST_X, user_id=user, tenant_id="public")
    forget_clusters(database)

    assert make_store(cluster_id="east").revoke(EAST_X)

    assert not live(database, before.pat_id)
    assert database.live_pats() == 0


def test_a_stale_finalizer_leaves_the_namesake_s_pat_whatever_rows_from_before_cluster_ids_say(
    make_store: StoreFactory, database: Database, clock: Clock
) -> None:
    # The old sandbox's row is from before cluster ids; a sandbox of its name created since
    # holds this cluster's row. A replica finalizing a stale copy of the old one must not
    # revoke the new one's PAT by claiming the old row (the claim loses to the new row).
    user = database.new_user()
    old_created = clock.now
    make_store(cluster_id="east").ensure(EAST_X, user_id=user, tenant_id="public")
    forget_clusters(database)
    clock.advance(timedelta(minutes=5))
    store = make_store(cluster_id="east")
    reborn = SandboxIdentity(EAST_X.namespace, EAST_X.name, "uid-east-x-again")
    new = store.ensure(reborn, user_id=user, tenant_id="public")

    store.revoke(EAST_X, created_at=old_created)

    assert live(database, new.pat_id)
