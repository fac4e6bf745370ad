"""Renewal without restart, the store's side: a PAT replaced because it is due for renewal
stays live for the grace period and no longer, until the pod is shown to use the new one
(``retire``); every other replacement still revokes it at once; deleting the sandbox or
its orphaned row revokes both."""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from alembic import command
from sqlalchemy import inspect, select, update

from craft_operator.config import load_settings
from craft_operator.credentials import (
    CredentialStore,
    IssuedCredential,
    SandboxIdentity,
    build_credential_store,
)
from craft_operator.credentials.db import alembic_config, head_revision
from craft_operator.credentials.orphans import revoke_orphan, rows_of_cluster
from craft_operator.credentials.revocation import REVOCATION_SKEW
from craft_operator.credentials.tables import PersonalAccessToken, SandboxCredential

from .conftest import Clock, Database

ALICE = SandboxIdentity("team-a", "alice", "6c1f5a52-0000-4000-8000-00000000000a")
BOB = SandboxIdentity("team-a", "bob", "6c1f5a52-0000-4000-8000-00000000000b")
LIFETIME = timedelta(hours=720)
GRACE = timedelta(minutes=5)
#: Far enough into the lifetime to be inside the renewal window (the last 20%).
INTO_WINDOW = LIFETIME * 0.81


def pat_row(database: Database, pat_id: int) -> Any:
    with database.engine.connect() as connection:
        return connection.execute(
            select(PersonalAccessToken.__table__).where(PersonalAccessToken.id == pat_id)
        ).one()


def stored_superseded(database: Database, identity: SandboxIdentity) -> int | None:
    table = SandboxCredential.__table__
    with database.engine.connect() as connection:
        value = connection.execute(
            select(table.c.superseded_pat_id).where(table.c.name == identity.name)
        ).scalar_one()
    return None if value is None else int(value)


def is_live(database: Database, pat_id: int, clock: Clock) -> bool:
    row = pat_row(database, pat_id)
    return not row.is_revoked and row.expires_at > clock.now


@pytest.fixture
def user(database: Database) -> Any:
    return database.new_user()


@pytest.fixture
def ensure(store: CredentialStore, user: Any) -> Callable[..., IssuedCredential]:
    def call(identity: SandboxIdentity = ALICE, **kwargs: Any) -> IssuedCredential:
        options: dict[str, Any] = {"user_id": user, "tenant_id": "public", "lifetime": LIFETIME}
        return store.ensure(identity, **(options | kwargs))

    return call


def test_a_renewal_keeps_the_old_pat_live_until_now_plus_grace_and_no_longer(
    ensure: Callable[..., IssuedCredential], database: Database, clock: Clock
) -> None:
    first = ensure()
    clock.advance(INTO_WINDOW)

    renewed = ensure()

    assert renewed.minted
    assert renewed.reason == "the PAT is inside its renewal window"
    assert (renewed.superseded_pat_id, renewed.grace_pat_id) == (first.pat_id, first.pat_id)
    assert renewed.grace_expires_at == clock.now + GRACE
    old = pat_row(database, first.pat_id)
    assert not old.is_revoked
    assert old.expires_at == clock.now + GRACE
    assert stored_superseded(database, ALICE) == first.pat_id
    assert database.live_pats(at=clock.now) == 2
    assert database.live_pats(at=clock.now + GRACE) == 1


def test_the_grace_never_extends_the_old_pat(
    make_store: Callable[..., CredentialStore], database: Database, clock: Clock, user: Any
) -> None:
    store = make_store(renewal_grace=timedelta(hours=2))
    lifetime = timedelta(hours=1)
    first = store.ensure(ALICE, user_id=user, tenant_id="public", lifetime=lifetime)
    clock.advance(timedelta(minutes=55))

    renewed = store.ensure(ALICE, user_id=user, tenant_id="public", lifetime=lifetime)

    assert renewed.grace_pat_id == first.pat_id
    assert pat_row(database, first.pat_id).expires_at == first.expires_at
    assert renewed.grace_expires_at == first.expires_at


def test_a_shortened_lifetime_is_a_renewal_too(
    ensure: Callable[..., IssuedCredential], database: Database, clock: Clock
) -> None:
    first = ensure()

    shorter = ensure(lifetime=timedelta(hours=24))

    assert shorter.reason == "the PAT outlives the sandbox's credential lifetime"
    assert shorter.grace_pat_id == first.pat_id
    assert pat_row(database, first.pat_id).expires_at == clock.now + GRACE


@pytest.mark.parametrize(
    "replacement",
    ["rejected", "another user", "another tenant", "an earlier sandbox", "requested"],
)
def test_any_other_replacement_revokes_the_old_pat_at_once(
    ensure: Callable[..., IssuedCredential],
    database: Database,
    clock: Clock,
    replacement: str,
) -> None:
    first = ensure()
    clock.advance(INTO_WINDOW)  # due for renewal too: the other reason still wins
    identity, options = ALICE, dict[str, Any]()
    if replacement == "rejected":
        options["rejected_pat_id"] = first.pat_id
    elif replacement == "another user":
        options["user_id"] = database.new_user()
    elif replacement == "another tenant":
        options["tenant_id"] = "acme"
    elif replacement == "an earlier sandbox":
        identity = SandboxIdentity(ALICE.namespace, ALICE.name, "another-uid")
    else:
        options["force_new"] = True

    again = ensure(identity, **options)

    assert again.minted
    assert again.superseded_pat_id == first.pat_id
    assert again.grace_pat_id is None
    old = pat_row(database, first.pat_id)
    assert old.is_revoked
    assert old.expires_at == clock.now - REVOCATION_SKEW
    assert stored_superseded(database, ALICE) is None
    assert database.live_pats(at=clock.now) == 1


def test_a_pat_that_never_expires_is_revoked_at_once_not_left_in_grace(
    ensure: Callable[..., IssuedCredential], database: Database, clock: Clock
) -> None:
    first = ensure()
    with database.engine.begin() as connection:
        table = PersonalAccessToken.__table__
        connection.execute(update(table).where(table.c.id == first.pat_id).values(expires_at=None))

    again = ensure()

    assert again.reason == "the PAT never expires"
    assert again.grace_pat_id is None
    assert pat_row(database, first.pat_id).is_revoked


def test_a_reuse_reports_the_pat_in_its_grace_until_it_expires(
    ensure: Callable[..., IssuedCredential], clock: Clock
) -> None:
    first = ensure()
    clock.advance(INTO_WINDOW)
    renewed = ensure()
    clock.advance(GRACE / 2)

    reused = ensure()
    clock.advance(GRACE / 2)
    later = ensure()

    assert (reused.minted, reused.pat_id) == (False, renewed.pat_id)
    assert reused.grace_pat_id == first.pat_id
    assert reused.superseded_pat_id is None
    assert (later.pat_id, later.grace_pat_id) == (renewed.pat_id, None)


def test_a_rejected_renewal_revokes_both_the_new_pat_and_the_one_in_its_grace(
    ensure: Callable[..., IssuedCredential], database: Database, clock: Clock
) -> None:
    first = ensure()
    clock.advance(INTO_WINDOW)
    renewed = ensure()

    replaced = ensure(rejected_pat_id=renewed.pat_id)

    assert replaced.grace_pat_id is None
    assert pat_row(database, renewed.pat_id).is_revoked
    assert pat_row(database, first.pat_id).is_revoked
    assert database.live_pats(at=clock.now) == 1


def test_a_second_renewal_keeps_one_pat_in_grace_and_revokes_the_earlier(
    ensure: Callable[..., IssuedCredential], database: Database, clock: Clock
) -> None:
    first = ensure()
    clock.advance(INTO_WINDOW)
    renewed = ensure()

    shorter = ensure(lifetime=timedelta(hours=24))

    assert shorter.grace_pat_id == renewed.pat_id
    assert pat_row(database, first.pat_id).is_revoked
    assert is_live(database, renewed.pat_id, clock)
    assert stored_superseded(database, ALICE) == renewed.pat_id
    assert database.live_pats(at=clock.now) == 2


def test_retire_revokes_the_superseded_pat_and_nothing_else(
    store: CredentialStore,
    ensure: Callable[..., IssuedCredential],
    database: Database,
    clock: Clock,
) -> None:
    alice_first, bob_first = ensure(ALICE), ensure(BOB)
    clock.advance(INTO_WINDOW)
    alice, bob = ensure(ALICE), ensure(BOB)

    revoked = store.retire(ALICE, alice.pat_id)

    assert revoked == alice_first.pat_id
    assert pat_row(database, alice_first.pat_id).is_revoked
    assert is_live(database, alice.pat_id, clock)
    assert is_live(database, bob.pat_id, clock)
    assert is_live(database, bob_first.pat_id, clock)  # bob's pod has not switched yet
    assert stored_superseded(database, ALICE) is None
    assert stored_superseded(database, BOB) == bob_first.pat_id
    assert ensure(ALICE).grace_pat_id is None


def test_retire_twice_is_a_no_op(
    store: CredentialStore, ensure: Callable[..., IssuedCredential], clock: Clock
) -> None:
    first = ensure()
    clock.advance(INTO_WINDOW)
    renewed = ensure()

    assert store.retire(ALICE, renewed.pat_id) == first.pat_id
    assert store.retire(ALICE, renewed.pat_id) is None


@pytest.mark.parametrize("who", ["the superseded PAT", "another uid", "another sandbox"])
def test_retire_acts_only_for_the_sandboxes_current_pat(
    store: CredentialStore,
    ensure: Callable[..., IssuedCredential],
    database: Database,
    clock: Clock,
    who: str,
) -> None:
    first = ensure()
    ensure(BOB)
    clock.advance(INTO_WINDOW)
    renewed = ensure()
    identity, pat_id = {
        "the superseded PAT": (ALICE, first.pat_id),
        "another uid": (
            SandboxIdentity(ALICE.namespace, ALICE.name, "another-uid"),
            renewed.pat_id,
        ),
        "another sandbox": (BOB, renewed.pat_id),
    }[who]

    assert store.retire(identity, pat_id) is None

    assert is_live(database, first.pat_id, clock)
    assert is_live(database, renewed.pat_id, clock)
    assert stored_superseded(database, ALICE) == first.pat_id


def test_retire_in_another_cluster_revokes_nothing(
    make_store: Callable[..., CredentialStore],
    ensure: Callable[..., IssuedCredential],
    database: Database,
    clock: Clock,
) -> None:
    first = ensure()
    clock.advance(INTO_WINDOW)
    renewed = ensure()

    assert make_store(cluster_id="elsewhere").retire(ALICE, renewed.pat_id) is None
    assert is_live(database, first.pat_id, clock)


def test_retire_after_the_grace_revokes_nothing_and_forgets_the_pat(
    store: CredentialStore,
    ensure: Callable[..., IssuedCredential],
    database: Database,
    clock: Clock,
) -> None:
    first = ensure()
    clock.advance(INTO_WINDOW)
    renewed = ensure()
    clock.advance(GRACE)

    assert store.retire(ALICE, renewed.pat_id) is None
    assert not pat_row(database, first.pat_id).is_revoked  # it simply expired
    assert stored_superseded(database, ALICE) is None


def test_deleting_the_sandbox_revokes_the_pat_and_the_one_in_its_grace(
    store: CredentialStore,
    ensure: Callable[..., IssuedCredential],
    database: Database,
    clock: Clock,
) -> None:
    first = ensure()
    clock.advance(INTO_WINDOW)
    renewed = ensure()

    assert store.revoke(ALICE)

    for pat_id in (first.pat_id, renewed.pat_id):
        assert pat_row(database, pat_id).is_revoked
    assert database.live_pats(at=clock.now) == 0


def test_the_orphan_sweep_revokes_the_pat_and_the_one_in_its_grace(
    store: CredentialStore,
    ensure: Callable[..., IssuedCredential],
    database: Database,
    clock: Clock,
) -> None:
    first = ensure()
    clock.advance(INTO_WINDOW)
    renewed = ensure()
    [row] = rows_of_cluster(store, store.cluster_id)

    assert row.superseded_pat_id == first.pat_id
    assert revoke_orphan(store, row, now=clock.now)

    for pat_id in (first.pat_id, renewed.pat_id):
        assert pat_row(database, pat_id).is_revoked
    assert database.live_pats(at=clock.now) == 0


def test_no_token_reaches_the_logs_through_renewal_retirement_and_deletion(
    store: CredentialStore,
    ensure: Callable[..., IssuedCredential],
    clock: Clock,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    first = ensure()
    clock.advance(INTO_WINDOW)
    renewed = ensure()
    reused = ensure()
    store.retire(ALICE, renewed.pat_id)
    store.revoke(ALICE)

    said = caplog.text + "".join(repr(c) for c in (first, renewed, reused))
    assert f"revoked PAT {first.pat_id}" in caplog.text
    for credential in (first, renewed):
        token = credential.token.get_secret_value()
        assert token not in said
        assert token[12:40] not in said


def test_the_migration_adds_and_drops_the_superseded_pat_column(database: Database) -> None:
    def columns() -> set[str]:
        return {
            c["name"] for c in inspect(database.engine).get_columns(SandboxCredential.__tablename__)
        }

    with database.engine.begin() as connection:
        command.downgrade(alembic_config(connection), "0003_library_sync")
    assert "superseded_pat_id" not in columns()

    with database.engine.begin() as connection:
        command.upgrade(alembic_config(connection), "head")
    assert "superseded_pat_id" in columns()
    assert head_revision() == "0007_sandbox_created_at"


def test_the_migration_keeps_existing_rows_with_no_superseded_pat(
    database: Database, keyring: Any, clock: Clock, user: Any
) -> None:
    store = CredentialStore(database.engine, keyring, clock=clock)
    first = store.ensure(ALICE, user_id=user, tenant_id="public", lifetime=LIFETIME)
    with database.engine.begin() as connection:
        command.downgrade(alembic_config(connection), "0003_library_sync")
    with database.engine.begin() as connection:
        command.upgrade(alembic_config(connection), "head")

    again = store.ensure(ALICE, user_id=user, tenant_id="public", lifetime=LIFETIME)

    assert (again.minted, again.pat_id, again.grace_pat_id) == (False, first.pat_id, None)
    assert stored_superseded(database, ALICE) is None


def test_the_grace_setting_reaches_the_store(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("CRAFT_CREDENTIAL_RENEWAL_GRACE", "90")
    store = build_credential_store(load_settings(state_dir=tmp_path))
    try:
        assert "renewal_grace=90s" in repr(store)
    finally:
        store.close()


def test_the_grace_must_be_positive(database: Database, keyring: Any) -> None:
    with pytest.raises(ValueError, match="renewal_grace"):
        CredentialStore(database.engine, keyring, renewal_grace=timedelta(0))
