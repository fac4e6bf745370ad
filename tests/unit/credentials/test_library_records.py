"""The library sync records beside the credentials: one per live sandbox, none left behind
by a sandbox that went without its finalizer."""

from __future__ import annotations

import pytest

from craft_operator.credentials import CredentialStore, SandboxIdentity
from craft_operator.credentials.library_records import load_record, save_record
from craft_operator.credentials.orphans import revoke_orphan, rows_of_cluster
from craft_operator.library.record import SyncRecord

from .conftest import Database

SANDBOX = SandboxIdentity("team-a", "alice", "6c1f5a52-0000-4000-8000-000000000001")
RECORD = SyncRecord(pod_uid="pod-1", entries={}, lines=0, digests=())

pytestmark = pytest.mark.unit


def save(database: Database, identity: SandboxIdentity) -> bool:
    return save_record(
        database.engine,
        sandbox_uid=identity.uid,
        namespace=identity.namespace,
        name=identity.name,
        record=RECORD,
    )


def test_a_sandbox_with_credentials_has_its_record_kept(
    store: CredentialStore, database: Database
) -> None:
    store.ensure(SANDBOX, user_id=database.new_user(), tenant_id="public")
    assert save(database, SANDBOX)
    assert load_record(database.engine, SANDBOX.uid) == RECORD


def test_a_sync_that_ends_after_its_sandboxs_credentials_went_writes_nothing(
    store: CredentialStore, database: Database
) -> None:
    """The finalizer revoked the PAT and deleted the record while a sync ran on: its late
    save must not leave a record that nothing would delete."""
    store.ensure(SANDBOX, user_id=database.new_user(), tenant_id="public")
    store.revoke(SANDBOX)

    assert not save(database, SANDBOX)
    assert load_record(database.engine, SANDBOX.uid) is None


def test_a_sandbox_recreated_under_its_name_takes_the_earlier_ones_record_with_its_row(
    store: CredentialStore, database: Database
) -> None:
    """The earlier sandbox went without its finalizer (removed by hand): the new one's PAT
    replaces the row the orphan sweep would have found, and the record must not stay."""
    user = database.new_user()
    store.ensure(SANDBOX, user_id=user, tenant_id="public")
    assert save(database, SANDBOX)
    reborn = SandboxIdentity(SANDBOX.namespace, SANDBOX.name, "another-uid")

    store.ensure(reborn, user_id=user, tenant_id="public")

    assert load_record(database.engine, SANDBOX.uid) is None
    assert not save(database, SANDBOX), "nor can a late sync of the earlier one write it"
    assert save(database, reborn)


def test_a_sandbox_deleted_before_its_first_pat_takes_an_earlier_ones_record_with_its_row(
    store: CredentialStore, database: Database
) -> None:
    """The earlier sandbox of the name went without its finalizer; the new one is deleted
    before it minted anything: its revocation deletes the earlier one's row, and the
    record must go with it (no sweep could find it after)."""
    store.ensure(SANDBOX, user_id=database.new_user(), tenant_id="public")
    assert save(database, SANDBOX)
    reborn = SandboxIdentity(SANDBOX.namespace, SANDBOX.name, "another-uid")

    store.revoke(reborn)

    assert load_record(database.engine, SANDBOX.uid) is None


def test_the_orphan_sweep_deletes_the_gone_sandboxs_record_with_its_row(
    store: CredentialStore, database: Database
) -> None:
    """The sandbox went without its finalizer and no sandbox of its name came back: the
    sweep's revocation is the last chance to delete its record."""
    store.ensure(SANDBOX, user_id=database.new_user(), tenant_id="public")
    assert save(database, SANDBOX)
    [row] = rows_of_cluster(store, store.cluster_id)

    assert revoke_orphan(store, row)

    assert load_record(database.engine, SANDBOX.uid) is None
