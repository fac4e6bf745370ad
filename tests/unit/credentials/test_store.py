"""The credential store's behaviour, in the embedded SQLite mode and in Onyx mode."""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import select, text, update

from craft_operator.credentials import (
    CredentialStore,
    Forgotten,
    KeyRing,
    PatState,
    SandboxIdentity,
    UserInactiveError,
    UserNotFoundError,
    generate_key_entry,
)
from craft_operator.credentials.db import upgrade
from craft_operator.credentials.errors import CredentialsError, KeyNotInRingError
from craft_operator.credentials.model import Revocation
from craft_operator.credentials.revocation import REVOCATION_SKEW
from craft_operator.credentials.store import DEFAULT_RENEWAL_GRACE, UNDECRYPTABLE
from craft_operator.credentials.tables import PersonalAccessToken, SandboxCredential
from craft_operator.credentials.tokens import PatType
from craft_operator.devtools.onyx_schema import set_user_active

from .conftest import Clock, Database

SANDBOX = SandboxIdentity("team-a", "alice", "6c1f5a52-0000-4000-8000-000000000001")
LIFETIME = timedelta(hours=720)


def pat_row(database: Database, pat_id: int) -> Any:
    with database.engine.connect() as connection:
        return connection.execute(
            select(PersonalAccessToken.__table__).where(PersonalAccessToken.id == pat_id)
        ).one()


def credential_row(database: Database) -> Any:
    with database.engine.connect() as connection:
        return connection.execute(select(SandboxCredential.__table__)).one()


def test_mints_a_craft_pat_in_onyx_format_on_first_use(
    store: CredentialStore, database: Database, clock: Clock
) -> None:
    user = database.new_user()

    issued = store.ensure(SANDBOX, user_id=str(user), tenant_id="public", lifetime=LIFETIME)

    token = issued.token.get_secret_value()
    assert issued.minted
    assert token.startswith("onyx_pat_")
    assert len(token) == len("onyx_pat_") + 256
    row = pat_row(database, issued.pat_id)
    assert row.hashed_token == hashlib.sha256(token.encode()).hexdigest()
    assert row.token_display == f"{token[:12]}****{token[-4:]}" == issued.token_display
    assert row.pat_type is PatType.CRAFT
    assert row.scopes == ["craft_sandbox"]
    assert row.user_id == user
    assert not row.is_revoked
    assert row.expires_at == clock.now + LIFETIME == issued.expires_at
    assert "team-a/alice" in row.name


def test_pat_type_is_stored_by_name(store: CredentialStore, database: Database) -> None:
    issued = store.ensure(SANDBOX, user_id=database.new_user(), tenant_id="public")

    with database.engine.connect() as connection:
        raw = connection.exec_driver_sql(
            f"SELECT pat_type FROM personal_access_token WHERE id = {issued.pat_id}"
        ).scalar_one()
    assert raw == "CRAFT"


def test_reuses_the_stored_token_while_the_pat_is_live(
    store: CredentialStore, database: Database, clock: Clock
) -> None:
    user = database.new_user()
    first = store.ensure(SANDBOX, user_id=user, tenant_id="public", lifetime=LIFETIME)
    clock.advance(LIFETIME * 0.5)

    again = store.ensure(SANDBOX, user_id=user, tenant_id="public", lifetime=LIFETIME)

    assert not again.minted
    assert again.pat_id == first.pat_id
    assert again.token.get_secret_value() == first.token.get_secret_value()
    assert database.live_pats(at=clock.now) == 1


def test_mints_inside_the_renewal_window_and_leaves_the_old_pat_live_for_the_grace_only(
    store: CredentialStore, database: Database, clock: Clock
) -> None:
    user = database.new_user()
    first = store.ensure(SANDBOX, user_id=user, tenant_id="public", lifetime=LIFETIME)
    clock.advance(LIFETIME * 0.81)

    renewed = store.ensure(SANDBOX, user_id=user, tenant_id="public", lifetime=LIFETIME)

    assert renewed.minted
    assert renewed.superseded_pat_id == first.pat_id
    old = pat_row(database, first.pat_id)
    assert not old.is_revoked
    assert old.expires_at == clock.now + DEFAULT_RENEWAL_GRACE
    assert database.live_pats(at=clock.now + DEFAULT_RENEWAL_GRACE) == 1


def test_the_renewal_share_is_configurable(
    make_store: Callable[..., CredentialStore], database: Database, clock: Clock
) -> None:
    store = make_store(renewal_fraction=0.5)
    user = database.new_user()
    first = store.ensure(SANDBOX, user_id=user, tenant_id="public", lifetime=LIFETIME)
    clock.advance(LIFETIME * 0.4)
    assert not store.ensure(SANDBOX, user_id=user, tenant_id="public", lifetime=LIFETIME).minted
    clock.advance(LIFETIME * 0.2)

    assert store.ensure(SANDBOX, user_id=user, tenant_id="public", lifetime=LIFETIME).pat_id != (
        first.pat_id
    )


def test_a_shortened_lifetime_replaces_the_pat(store: CredentialStore, database: Database) -> None:
    user = database.new_user()
    store.ensure(SANDBOX, user_id=user, tenant_id="public", lifetime=LIFETIME)

    shorter = store.ensure(SANDBOX, user_id=user, tenant_id="public", lifetime=timedelta(hours=24))

    assert shorter.minted
    assert shorter.expires_at - shorter.created_at == timedelta(hours=24)


@pytest.mark.parametrize("how", ["revoked", "expired", "deleted"])
def test_mints_when_the_pat_is_no_longer_live(
    store: CredentialStore, database: Database, how: str
) -> None:
    user = database.new_user()
    first = store.ensure(SANDBOX, user_id=user, tenant_id="public")
    pat = PersonalAccessToken.__table__
    with database.engine.begin() as connection:
        where = pat.c.id == first.pat_id
        if how == "revoked":
            connection.execute(update(pat).where(where).values(is_revoked=True))
        elif how == "expired":
            connection.execute(update(pat).where(where).values(expires_at=first.created_at))
        else:
            connection.execute(pat.delete().where(where))

    again = store.ensure(SANDBOX, user_id=user, tenant_id="public")

    assert again.minted
    assert again.pat_id != first.pat_id
    assert again.reason is not None
    assert how[:6] in again.reason.replace("missing", "deleted")


def test_a_pat_only_marked_revoked_is_replaced_and_made_to_expire_as_onyx_revokes(
    store: CredentialStore, database: Database
) -> None:
    # Onyx's server authenticates by expires_at alone; an admin's `SET is_revoked = true`
    # leaves the token working for its 30 days unless the operator finishes the revocation.
    user = database.new_user()
    first = store.ensure(SANDBOX, user_id=user, tenant_id="public")
    pat = PersonalAccessToken.__table__
    with database.engine.begin() as connection:
        connection.execute(update(pat).where(pat.c.id == first.pat_id).values(is_revoked=True))
    assert database.live_pats(user_id=user) == 1, "still accepted by Onyx's server"

    again = store.ensure(SANDBOX, user_id=user, tenant_id="public")

    assert again.minted
    assert again.reason is not None
    assert "revoked" in again.reason
    assert database.live_pats(user_id=user) == 1, "the new one only: the old one expired"
    with database.engine.connect() as connection:
        old = connection.execute(select(pat).where(pat.c.id == first.pat_id)).one()
    assert old.is_revoked


def test_mints_when_the_stored_hash_does_not_match(
    store: CredentialStore, database: Database
) -> None:
    user = database.new_user()
    first = store.ensure(SANDBOX, user_id=user, tenant_id="public")
    with database.engine.begin() as connection:
        connection.execute(
            update(PersonalAccessToken.__table__)
            .where(PersonalAccessToken.id == first.pat_id)
            .values(hashed_token="0" * 64)
        )

    again = store.ensure(SANDBOX, user_id=user, tenant_id="public")

    assert again.minted
    assert again.token.get_secret_value() != first.token.get_secret_value()


def test_a_recreated_sandbox_of_the_same_name_gets_a_new_pat(
    store: CredentialStore, database: Database
) -> None:
    user = database.new_user()
    first = store.ensure(SANDBOX, user_id=user, tenant_id="public")
    reborn = SandboxIdentity(SANDBOX.namespace, SANDBOX.name, "another-uid")

    again = store.ensure(reborn, user_id=user, tenant_id="public")

    assert again.minted
    assert again.superseded_pat_id == first.pat_id
    assert pat_row(database, first.pat_id).is_revoked


def test_revoking_for_a_deleted_sandbox_leaves_the_pat_of_a_namesake_created_since(
    store: CredentialStore, database: Database, clock: Clock
) -> None:
    # A replica finalizing a stale copy of the first sandbox, after it was deleted and a
    # sandbox of the same name created and given its PAT.
    user = database.new_user()
    first_created = clock.now
    clock.advance(timedelta(minutes=5))
    reborn = SandboxIdentity(SANDBOX.namespace, SANDBOX.name, "another-uid")
    live = store.ensure(reborn, user_id=user, tenant_id="public")

    assert store.revoke(SANDBOX, created_at=first_created) is Revocation.NOTHING

    assert not pat_row(database, live.pat_id).is_revoked
    info = store.show(SANDBOX.namespace, SANDBOX.name)
    assert info is not None
    assert info.pat_id == live.pat_id


def test_a_late_ensure_for_a_deleted_sandbox_leaves_the_pat_of_a_namesake_created_since(
    store: CredentialStore, database: Database, clock: Clock
) -> None:
    # A pass for the first sandbox running late (a replica not yet standing by, a
    # database call that hung), after it was deleted and its namesake given a PAT.
    user = database.new_user()
    first = SandboxIdentity(SANDBOX.namespace, SANDBOX.name, "first-uid", created_at=clock.now)
    store.ensure(first, user_id=user, tenant_id="public")
    clock.advance(timedelta(minutes=1))
    assert store.revoke(first, created_at=first.created_at) is Revocation.REVOKED
    reborn = SandboxIdentity(SANDBOX.namespace, SANDBOX.name, "reborn-uid", created_at=clock.now)
    live = store.ensure(reborn, user_id=user, tenant_id="public")
    clock.advance(timedelta(seconds=10))

    with pytest.raises(CredentialsError, match="a sandbox of that name created since"):
        store.ensure(first, user_id=user, tenant_id="public")

    assert not pat_row(database, live.pat_id).is_revoked
    info = store.show(SANDBOX.namespace, SANDBOX.name)
    assert info is not None
    assert info.pat_id == live.pat_id
    assert store.ensure(reborn, user_id=user, tenant_id="public").pat_id == live.pat_id


def test_a_sandbox_replaces_the_pat_of_an_earlier_namesake_written_after_it_was_created(
    store: CredentialStore, database: Database, clock: Clock
) -> None:
    # The earlier sandbox's late pass wrote its row after this one was created: by
    # creation times it is still the earlier one's, an orphan this one replaces.
    user = database.new_user()
    earlier = SandboxIdentity(SANDBOX.namespace, SANDBOX.name, "earlier-uid", created_at=clock.now)
    clock.advance(timedelta(minutes=1))
    later = SandboxIdentity(SANDBOX.namespace, SANDBOX.name, "later-uid", created_at=clock.now)
    clock.advance(timedelta(minutes=1))
    left = store.ensure(earlier, user_id=user, tenant_id="public")

    mine = store.ensure(later, user_id=user, tenant_id="public")

    assert mine.minted
    assert pat_row(database, left.pat_id).is_revoked


def test_a_finalizer_never_revokes_a_live_namesakes_pat_for_a_creation_time_left_on_its_row(
    store: CredentialStore, database: Database, clock: Clock
) -> None:
    # An older operator (rolled back to, the column kept) minted for the live sandbox over
    # an earlier one's row: its UPDATE left that one's creation time on the row.
    user = database.new_user()
    earliest = SandboxIdentity(
        SANDBOX.namespace, SANDBOX.name, "earliest-uid", created_at=clock.now
    )
    store.ensure(earliest, user_id=user, tenant_id="public")
    clock.advance(timedelta(minutes=1))
    deleted_created = clock.now
    clock.advance(timedelta(minutes=1))
    live = store.ensure(
        SandboxIdentity(SANDBOX.namespace, SANDBOX.name, "live-uid"),
        user_id=user,
        tenant_id="public",
    )
    with database.engine.begin() as connection:
        connection.execute(
            update(SandboxCredential.__table__).values(sandbox_created_at=earliest.created_at)
        )
    clock.advance(timedelta(minutes=1))

    # A replica finalizing a stale copy of a sandbox made and deleted in between.
    assert store.revoke(SANDBOX, created_at=deleted_created) is Revocation.NOTHING

    assert not pat_row(database, live.pat_id).is_revoked


def test_revoking_a_sandbox_revokes_a_pat_left_by_an_earlier_one_of_its_name(
    store: CredentialStore, database: Database, clock: Clock
) -> None:
    earlier = SandboxIdentity(SANDBOX.namespace, SANDBOX.name, "earlier-uid")
    left = store.ensure(earlier, user_id=database.new_user(), tenant_id="public")
    clock.advance(timedelta(minutes=10))  # beyond the clocks' skew allowed for

    assert store.revoke(SANDBOX, created_at=clock.now) is Revocation.REVOKED

    assert pat_row(database, left.pat_id).is_revoked
    assert store.show(SANDBOX.namespace, SANDBOX.name) is None


@pytest.mark.parametrize("recorded", [False, True], ids=["row-of-an-older-image", "same-second"])
def test_a_late_finalizer_keeps_a_namesakes_pat_whatever_the_clocks_skew(
    store: CredentialStore, database: Database, clock: Clock, recorded: bool
) -> None:
    """The row's write time is the operator's clock, the sandboxes' creation the API
    server's, to the second; here the operator's runs 2 minutes behind. B, the sandbox
    made again under A's name 40 s later (or in the same second), keeps its live PAT when
    a stale pass for A finalizes late."""
    user = database.new_user()
    api_now = (clock.now + timedelta(minutes=2)).replace(microsecond=0)
    a_created = api_now
    b_created = api_now if recorded else None
    if not recorded:
        clock.advance(timedelta(seconds=40))  # and B's row from an image before 0007
    b = SandboxIdentity(SANDBOX.namespace, SANDBOX.name, "b-uid", created_at=b_created)
    store.ensure(b, user_id=user, tenant_id="public")

    a = SandboxIdentity(SANDBOX.namespace, SANDBOX.name, "a-uid", created_at=a_created)
    store.revoke(a, created_at=a_created)

    assert database.live_pats(user_id=user, at=clock.now) == 1


def test_a_changed_tenant_gets_a_new_pat_in_its_own_form(
    store: CredentialStore, database: Database
) -> None:
    user = database.new_user()
    first = store.ensure(SANDBOX, user_id=user, tenant_id="public")

    again = store.ensure(SANDBOX, user_id=user, tenant_id="acme")

    assert again.superseded_pat_id == first.pat_id
    assert again.token.get_secret_value().startswith("onyx_pat_acme.")


def test_force_new_replaces_a_live_pat(store: CredentialStore, database: Database) -> None:
    user = database.new_user()
    first = store.ensure(SANDBOX, user_id=user, tenant_id="public")

    again = store.ensure(SANDBOX, user_id=user, tenant_id="public", force_new=True)

    assert again.minted
    assert again.superseded_pat_id == first.pat_id
    assert pat_row(database, first.pat_id).is_revoked
    assert database.live_pats() == 1


def test_a_rejected_pat_is_replaced_only_once(store: CredentialStore, database: Database) -> None:
    user = database.new_user()
    first = store.ensure(SANDBOX, user_id=user, tenant_id="public")

    replaced = store.ensure(SANDBOX, user_id=user, tenant_id="public", rejected_pat_id=first.pat_id)
    again = store.ensure(SANDBOX, user_id=user, tenant_id="public", rejected_pat_id=first.pat_id)

    assert replaced.minted
    assert replaced.pat_id != first.pat_id
    assert not again.minted
    assert again.pat_id == replaced.pat_id


def test_other_tenants_get_the_multi_tenant_token_form(
    store: CredentialStore, database: Database
) -> None:
    issued = store.ensure(SANDBOX, user_id=database.new_user(), tenant_id="tenant_acme")

    assert issued.token.get_secret_value().startswith("onyx_pat_tenant_acme.")


def test_revoke_revokes_the_pat_and_is_idempotent(
    store: CredentialStore, database: Database, clock: Clock
) -> None:
    issued = store.ensure(SANDBOX, user_id=database.new_user(), tenant_id="public")

    assert store.revoke(SANDBOX) is Revocation.REVOKED
    assert store.revoke(SANDBOX) is Revocation.NOTHING

    row = pat_row(database, issued.pat_id)
    assert row.is_revoked
    # Dated back: Onyx's server judges by expires_at on its own clock, maybe behind ours.
    assert row.expires_at == clock.now - REVOCATION_SKEW
    assert store.show(SANDBOX.namespace, SANDBOX.name) is None
    assert database.live_pats(at=clock.now - REVOCATION_SKEW + timedelta(seconds=1)) == 0


@pytest.mark.parametrize("onyx", ["deleted it", "gave its id to another PAT"])
def test_a_pat_no_longer_in_onyx_is_not_said_to_be_revoked_its_row_is_only_forgotten(
    store: CredentialStore, database: Database, onyx: str
) -> None:
    issued = store.ensure(SANDBOX, user_id=database.new_user(), tenant_id="public")
    pat = PersonalAccessToken.__table__
    with database.engine.begin() as connection:
        if onyx == "deleted it":
            connection.execute(pat.delete().where(pat.c.id == issued.pat_id))
        else:  # a schema restored: the id is now another PAT's, of another name
            connection.execute(update(pat).where(pat.c.id == issued.pat_id).values(name="x"))

    info = store.revoke_named(SANDBOX.namespace, SANDBOX.name)  # credentials revoke

    assert info is not None
    assert info.forgotten is Forgotten.PAT_NOT_IN_ONYX
    assert store.show(SANDBOX.namespace, SANDBOX.name) is None
    if onyx != "deleted it":
        assert not pat_row(database, issued.pat_id).is_revoked, "another's PAT is left alone"


def test_the_finalizer_is_told_a_pat_no_longer_in_onyx_was_not_revoked(
    store: CredentialStore, database: Database
) -> None:
    issued = store.ensure(SANDBOX, user_id=database.new_user(), tenant_id="public")
    pat = PersonalAccessToken.__table__
    with database.engine.begin() as connection:
        connection.execute(pat.delete().where(pat.c.id == issued.pat_id))

    assert store.revoke(SANDBOX) is Revocation.NOT_IN_ONYX
    assert store.show(SANDBOX.namespace, SANDBOX.name) is None
    assert store.revoke(SANDBOX) is Revocation.NOTHING


def test_a_revoked_pat_fails_at_an_onyx_server_whose_clock_is_minutes_behind(
    store: CredentialStore, database: Database, clock: Clock
) -> None:
    """Onyx's server goes by expires_at against its own clock alone."""
    onyx_now = clock.now
    clock.advance(timedelta(minutes=4))  # the operator's clock ahead of the server's
    store.ensure(SANDBOX, user_id=database.new_user(), tenant_id="public")

    assert store.revoke(SANDBOX)

    assert database.live_pats(at=onyx_now + timedelta(seconds=1)) == 0


def test_after_revocation_ensure_mints_a_fresh_pat(
    store: CredentialStore, database: Database
) -> None:
    user = database.new_user()
    first = store.ensure(SANDBOX, user_id=user, tenant_id="public")
    store.revoke(SANDBOX)

    fresh = store.ensure(SANDBOX, user_id=user, tenant_id="public")

    assert fresh.minted
    assert fresh.pat_id != first.pat_id
    assert database.live_pats() == 1


def test_show_describes_the_pat_without_the_token(
    store: CredentialStore, database: Database, clock: Clock
) -> None:
    user = database.new_user()
    issued = store.ensure(SANDBOX, user_id=user, tenant_id="public")

    info = store.show(SANDBOX.namespace, SANDBOX.name)

    assert info is not None
    assert (info.pat_id, info.token_display, info.pat_state) == (
        issued.pat_id,
        issued.token_display,
        PatState.LIVE,
    )
    assert info.user_id == str(user)
    assert info.key_id == "k1"
    assert issued.token.get_secret_value() not in repr(info)
    clock.advance(LIFETIME * 2)
    later = store.show(SANDBOX.namespace, SANDBOX.name)
    assert later is not None
    assert later.pat_state is PatState.EXPIRED


def test_the_token_is_stored_only_encrypted(store: CredentialStore, database: Database) -> None:
    issued = store.ensure(SANDBOX, user_id=database.new_user(), tenant_id="public")
    token = issued.token.get_secret_value().encode()

    row = credential_row(database)

    assert token not in bytes(row.encrypted_token)
    assert row.key_id == "k1"
    dump = b"".join(str(value).encode() for value in row)
    assert token not in dump


def assert_replaced_as_undecryptable(
    issued: Any, old: Any, database: Database, *, naming: tuple[str, ...]
) -> None:
    """A new PAT replaced ``old`` because the stored token could not be decrypted."""
    assert issued.minted
    assert issued.superseded_pat_id == old.pat_id
    assert issued.reason.startswith(UNDECRYPTABLE)
    for fragment in naming:
        assert fragment in issued.reason
    assert pat_row(database, old.pat_id).is_revoked
    assert not pat_row(database, issued.pat_id).is_revoked
    assert database.live_pats() == 1


def test_a_tampered_stored_token_is_revoked_and_replaced_naming_key_and_sandbox(
    store: CredentialStore, database: Database
) -> None:
    user = database.new_user()
    old = store.ensure(SANDBOX, user_id=user, tenant_id="public")
    envelope = bytearray(credential_row(database).encrypted_token)
    envelope[-5] ^= 0x01
    with database.engine.begin() as connection:
        connection.execute(
            update(SandboxCredential.__table__).values(encrypted_token=bytes(envelope))
        )

    issued = store.ensure(SANDBOX, user_id=user, tenant_id="public")

    assert_replaced_as_undecryptable(issued, old, database, naming=("'k1'", "team-a/alice"))
    assert store.ensure(SANDBOX, user_id=user, tenant_id="public").pat_id == issued.pat_id


def test_ciphertexts_swapped_between_sandboxes_are_revoked_and_replaced(
    store: CredentialStore, database: Database
) -> None:
    user = database.new_user()
    bob = SandboxIdentity("team-a", "bob", "6c1f5a52-0000-4000-8000-000000000002")
    old = {
        identity.name: store.ensure(identity, user_id=user, tenant_id="public")
        for identity in (SANDBOX, bob)
    }
    table = SandboxCredential.__table__
    with database.engine.begin() as connection:
        rows = {r.name: r for r in connection.execute(select(table)).all()}
        for mine, theirs in (("alice", "bob"), ("bob", "alice")):
            connection.execute(
                update(table)
                .where(table.c.name == mine)
                .values(encrypted_token=rows[theirs].encrypted_token)
            )

    for identity in (SANDBOX, bob):
        issued = store.ensure(identity, user_id=user, tenant_id="public")
        assert issued.minted
        assert issued.superseded_pat_id == old[identity.name].pat_id
        assert identity.name in (issued.reason or "")
        # Neither sandbox ever receives the other's token.
        other = old["bob" if identity is SANDBOX else "alice"]
        assert issued.token.get_secret_value() != other.token.get_secret_value()
    assert database.live_pats() == 2


def test_a_key_missing_from_the_ring_leaves_the_token_and_its_pat_alone(
    make_store: Callable[..., CredentialStore], database: Database
) -> None:
    user = database.new_user()
    old = make_store().ensure(SANDBOX, user_id=user, tenant_id="public")
    before = credential_row(database)
    other = make_store(KeyRing.parse(generate_key_entry("k2").get_secret_value()))

    with pytest.raises(KeyNotInRingError) as caught:
        other.ensure(SANDBOX, user_id=user, tenant_id="public")

    message = str(caught.value)
    assert "key 'k1', which is not in the key ring (it has 'k2')" in message
    assert "nothing was revoked" in message
    assert "put key 'k1' back in the key ring" in message
    assert "craft-operator credentials revoke team-a/alice" in message
    assert caught.value.key_id == "k1"
    assert not pat_row(database, old.pat_id).is_revoked
    assert credential_row(database) == before
    assert database.live_pats() == 1


def test_revoke_works_even_when_the_token_cannot_be_decrypted(
    make_store: Callable[..., CredentialStore], database: Database
) -> None:
    issued = make_store().ensure(SANDBOX, user_id=database.new_user(), tenant_id="public")
    stranger = make_store(KeyRing.parse(generate_key_entry("k9").get_secret_value()))

    assert stranger.revoke(SANDBOX)
    assert pat_row(database, issued.pat_id).is_revoked


def test_a_user_id_that_is_not_a_uuid_is_a_user_error(store: CredentialStore) -> None:
    with pytest.raises(UserNotFoundError, match="not a UUID"):
        store.ensure(SANDBOX, user_id="alice", tenant_id="public")


@pytest.fixture
def onyx_store(onyx_database: Database, keyring: KeyRing) -> Iterator[CredentialStore]:
    upgrade(onyx_database.engine)
    store = CredentialStore(onyx_database.engine, keyring)
    yield store
    store.close()


@pytest.mark.postgres
def test_onyx_mode_rejects_an_unknown_user(
    onyx_store: CredentialStore, onyx_database: Database
) -> None:
    with pytest.raises(UserNotFoundError, match="does not exist"):
        onyx_store.ensure(SANDBOX, user_id=uuid.uuid4(), tenant_id="public")
    assert onyx_database.live_pats() == 0


@pytest.mark.postgres
def test_onyx_mode_rejects_an_inactive_user(
    onyx_store: CredentialStore, onyx_database: Database
) -> None:
    inactive = onyx_database.new_user(active=False)
    with pytest.raises(UserInactiveError, match="inactive"):
        onyx_store.ensure(SANDBOX, user_id=inactive, tenant_id="public")

    user = onyx_database.new_user()
    onyx_store.ensure(SANDBOX, user_id=user, tenant_id="public")
    set_user_active(onyx_database.engine, user, False)
    with pytest.raises(UserInactiveError):
        onyx_store.ensure(SANDBOX, user_id=user, tenant_id="public")


@pytest.mark.postgres
def test_a_deleted_user_is_reported_as_not_found(
    onyx_store: CredentialStore, onyx_database: Database
) -> None:
    user = onyx_database.new_user()
    onyx_store.ensure(SANDBOX, user_id=user, tenant_id="public")
    with onyx_database.engine.begin() as connection:
        connection.execute(text('DELETE FROM "user" WHERE id = :id'), {"id": user})

    with pytest.raises(UserNotFoundError):
        onyx_store.ensure(SANDBOX, user_id=user, tenant_id="public")
