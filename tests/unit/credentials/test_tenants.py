"""Multi-tenant Onyx (CRAFT_ONYX_MULTI_TENANT): each tenant's PATs live in its own schema.

Onyx Cloud keeps every tenant's ``user`` and ``personal_access_token`` tables in a Postgres
schema named by the tenant id, and none in ``public``; it reads the tenant from the token
and looks the PAT up in that schema. The databases here are shaped so: two tenant schemas
with Onyx's tables, nothing of Onyx's in the default schema. PAT ids are a sequence per
schema, so both tenants' first PATs have the same id: acting in the wrong schema would
show. With the setting off, Onyx's tables are those of the default schema for every tenant.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa
from click.testing import CliRunner
from pydantic import SecretStr
from sqlalchemy import Engine

from craft_operator.cli import main
from craft_operator.config import load_settings
from craft_operator.credentials import (
    CredentialsError,
    CredentialStore,
    Forgotten,
    KeyRing,
    PatState,
    SandboxIdentity,
    SchemaMissingError,
    UserInactiveError,
    UserNotFoundError,
    build_credential_store,
)
from craft_operator.credentials.db import check_schema, create_credentials_engine, upgrade
from craft_operator.credentials.errors import TenantGoneError
from craft_operator.credentials.model import Revocation
from craft_operator.credentials.orphans import revoke_orphan, rows_of_cluster
from craft_operator.credentials.tables import SandboxCredential
from craft_operator.credentials.tenants import DEFAULT_TABLES, OnyxTables, tenant_tables
from craft_operator.credentials.tokens import hash_token
from craft_operator.devtools.onyx_schema import add_user, create_onyx_tables, set_user_active
from craft_operator.devtools.postgres import ThrowawayPostgres

from .conftest import Clock

pytestmark = pytest.mark.postgres

TENANT_A, TENANT_B = "tenant_a", "tenant-b"
CLUSTER = "east"
ALICE = SandboxIdentity("team-a", "alice", "6c1f5a52-0000-4000-8000-00000000000a")
BOB = SandboxIdentity("team-b", "bob", "6c1f5a52-0000-4000-8000-00000000000b")
LIFETIME = timedelta(hours=1)
INTO_WINDOW = timedelta(minutes=50)  # less than a fifth of the lifetime left


@dataclass
class TenantDatabase:
    """A Postgres database shaped like multi-tenant Onyx's, migrated by the operator."""

    url: str
    engine: Engine

    def new_user(self, tenant: str, *, active: bool = True) -> uuid.UUID:
        """A user of ``tenant``, in its schema only."""
        return add_user(self.engine, active=active, schema=tenant)

    def pats(self, tenant: str | None) -> list[Any]:
        """Every PAT of ``tenant``'s schema (None: the default schema's), oldest first."""
        pat = DEFAULT_TABLES.pat if tenant is None else tenant_tables(tenant).pat
        with self.engine.connect() as connection:
            return list(connection.execute(sa.select(pat).order_by(pat.c.id)))

    def pat(self, tenant: str, pat_id: int) -> Any:
        pat = tenant_tables(tenant).pat
        with self.engine.connect() as connection:
            return connection.execute(sa.select(pat).where(pat.c.id == pat_id)).one()

    def authenticates(self, tenant: str, token: SecretStr) -> bool:
        """Whether Onyx would accept ``token`` for ``tenant``: a PAT of the token's hash in
        the tenant's schema, not expired (Onyx goes by ``expires_at``), of an active user
        of that schema."""
        pat, user = tenant_tables(tenant)
        query = (
            sa.select(sa.func.count())
            .select_from(pat.join(user, user.c.id == pat.c.user_id))
            .where(
                pat.c.hashed_token == hash_token(token),
                sa.or_(pat.c.expires_at.is_(None), pat.c.expires_at > datetime.now(UTC)),
                user.c.is_active.is_(True),
            )
        )
        with self.engine.connect() as connection:
            return int(connection.execute(query).scalar_one()) == 1

    def recreate(self, tenant: str, *users: uuid.UUID) -> None:
        """Drop ``tenant``'s schema and make it again with only ``users`` (as a restore of
        a backup taken before its PATs would): its PAT ids start again from 1, while the
        operator's own table, in the default schema, keeps its rows."""
        with self.engine.begin() as connection:
            connection.execute(sa.text(f'DROP SCHEMA "{tenant}" CASCADE'))
        create_onyx_tables(self.engine, schema=tenant)
        for user in users:
            add_user(self.engine, user_id=user, schema=tenant)

    def rows(self) -> list[Any]:
        table = SandboxCredential.__table__
        with self.engine.connect() as connection:
            return list(connection.execute(sa.select(table.c.name, table.c.tenant_id)))


def tenant_schemas(server: ThrowawayPostgres, *, default_tables: bool = False) -> str:
    """A fresh database with Onyx's tables in the schemas of TENANT_A and TENANT_B (and in
    the default schema only if ``default_tables``); its URL."""
    url = server.create_database()
    engine = create_credentials_engine(url)
    try:
        for tenant in (TENANT_A, TENANT_B):
            create_onyx_tables(engine, schema=tenant)
        if default_tables:
            create_onyx_tables(engine)
    finally:
        engine.dispose()
    return url


@pytest.fixture
def tenants(postgres_server: ThrowawayPostgres) -> Iterator[TenantDatabase]:
    url = tenant_schemas(postgres_server)
    engine = create_credentials_engine(url)
    upgrade(engine, multi_tenant=True)
    yield TenantDatabase(url, engine)
    engine.dispose()


@pytest.fixture
def make_store(
    tenants: TenantDatabase, keyring: KeyRing, clock: Clock
) -> Iterator[Callable[..., CredentialStore]]:
    stores: list[CredentialStore] = []

    def make(**kwargs: Any) -> CredentialStore:
        options: dict[str, Any] = {"clock": clock, "cluster_id": CLUSTER, "multi_tenant": True}
        store = CredentialStore(tenants.engine, keyring, **(options | kwargs))
        stores.append(store)
        return store

    yield make
    for store in stores:
        store.close()


@pytest.fixture
def store(make_store: Callable[..., CredentialStore]) -> CredentialStore:
    return make_store()


def ensure(
    store: CredentialStore, who: SandboxIdentity, user: uuid.UUID, tenant: str, **kwargs: Any
) -> Any:
    return store.ensure(who, user_id=user, tenant_id=tenant, lifetime=LIFETIME, **kwargs)


def test_a_minted_pat_is_in_its_tenant_s_schema_and_authenticates_as_onyx_looks_it_up(
    store: CredentialStore, tenants: TenantDatabase
) -> None:
    user = tenants.new_user(TENANT_A)

    issued = ensure(store, ALICE, user, TENANT_A)

    assert issued.token.get_secret_value().startswith(f"onyx_pat_{TENANT_A}.")
    assert tenants.authenticates(TENANT_A, issued.token)
    [pat] = tenants.pats(TENANT_A)
    assert (pat.id, pat.user_id, pat.pat_type, pat.scopes) == (
        issued.pat_id,
        user,
        "CRAFT",
        ["craft_sandbox"],
    )
    assert tenants.pats(TENANT_B) == []
    assert tenants.rows() == [("alice", TENANT_A)]  # the operator's own table: default schema


def test_a_stored_pat_is_reused_from_its_tenant_s_schema(
    store: CredentialStore, tenants: TenantDatabase
) -> None:
    user = tenants.new_user(TENANT_A)
    first = ensure(store, ALICE, user, TENANT_A)

    again = ensure(store, ALICE, user, TENANT_A)

    assert (again.minted, again.pat_id) == (False, first.pat_id)


def test_the_user_check_reads_the_users_of_the_sandbox_s_tenant(
    store: CredentialStore, tenants: TenantDatabase
) -> None:
    elsewhere = tenants.new_user(TENANT_B)
    with pytest.raises(UserNotFoundError):
        ensure(store, ALICE, elsewhere, TENANT_A)

    # The same id, inactive in its tenant and active in another: inactive.
    user = tenants.new_user(TENANT_A, active=False)
    add_user(tenants.engine, user_id=user, schema=TENANT_B)
    with pytest.raises(UserInactiveError):
        ensure(store, ALICE, user, TENANT_A)
    assert tenants.pats(TENANT_A) == []
    assert tenants.pats(TENANT_B) == []


def test_a_user_deactivated_in_the_tenant_s_schema_stops_the_reuse(
    store: CredentialStore, tenants: TenantDatabase
) -> None:
    user = tenants.new_user(TENANT_A)
    ensure(store, ALICE, user, TENANT_A)
    set_user_active(tenants.engine, user, False, schema=TENANT_A)

    with pytest.raises(UserInactiveError):
        ensure(store, ALICE, user, TENANT_A)


def test_revoking_a_sandbox_revokes_its_pat_in_its_tenant_s_schema_only(
    store: CredentialStore, tenants: TenantDatabase
) -> None:
    alice = ensure(store, ALICE, tenants.new_user(TENANT_A), TENANT_A)
    bob = ensure(store, BOB, tenants.new_user(TENANT_B), TENANT_B)
    assert alice.pat_id == bob.pat_id  # a sequence per schema

    assert store.revoke(ALICE)

    assert not tenants.authenticates(TENANT_A, alice.token)
    assert tenants.pat(TENANT_A, alice.pat_id).is_revoked
    assert tenants.authenticates(TENANT_B, bob.token)
    assert tenants.rows() == [("bob", TENANT_B)]


def test_the_cli_s_revoke_by_name_finds_the_row_s_tenant(
    store: CredentialStore, tenants: TenantDatabase
) -> None:
    bob = ensure(store, BOB, tenants.new_user(TENANT_B), TENANT_B)
    alice = ensure(store, ALICE, tenants.new_user(TENANT_A), TENANT_A)

    revoked = store.revoke_named(BOB.namespace, BOB.name)

    assert revoked is not None
    assert revoked.pat_id == bob.pat_id
    assert not tenants.authenticates(TENANT_B, bob.token)
    assert tenants.authenticates(TENANT_A, alice.token)


def test_show_reads_the_pat_in_its_tenant_s_schema(
    store: CredentialStore, tenants: TenantDatabase
) -> None:
    alice = ensure(store, ALICE, tenants.new_user(TENANT_A), TENANT_A)
    ensure(store, BOB, tenants.new_user(TENANT_B), TENANT_B)
    pat = tenant_tables(TENANT_B).pat
    with tenants.engine.begin() as connection:  # an admin revokes Bob's PAT in Onyx
        connection.execute(sa.update(pat).values(is_revoked=True, expires_at=sa.func.now()))

    shown_alice = store.show(ALICE.namespace, ALICE.name)
    shown_bob = store.show(BOB.namespace, BOB.name)

    assert shown_alice is not None
    assert shown_alice.pat_id == alice.pat_id
    assert (shown_alice.tenant_id, shown_alice.pat_state) == (TENANT_A, PatState.LIVE)
    assert shown_bob is not None
    assert (shown_bob.tenant_id, shown_bob.pat_state) == (TENANT_B, PatState.REVOKED)


def test_a_renewal_and_the_retirement_act_on_the_tenant_s_schema(
    store: CredentialStore, tenants: TenantDatabase, clock: Clock
) -> None:
    user = tenants.new_user(TENANT_A)
    first = ensure(store, ALICE, user, TENANT_A)
    bob = ensure(store, BOB, tenants.new_user(TENANT_B), TENANT_B)
    clock.advance(INTO_WINDOW)

    renewed = ensure(store, ALICE, user, TENANT_A)

    assert renewed.minted
    assert renewed.grace_pat_id == first.pat_id
    assert tenants.pat(TENANT_A, first.pat_id).expires_at <= renewed.grace_expires_at
    assert tenants.pat(TENANT_B, bob.pat_id).expires_at == bob.expires_at
    assert store.retire(ALICE, renewed.pat_id) == first.pat_id
    assert tenants.pat(TENANT_A, first.pat_id).is_revoked
    assert not tenants.pat(TENANT_B, bob.pat_id).is_revoked
    assert tenants.authenticates(TENANT_A, renewed.token)


def test_the_orphan_sweep_revokes_each_row_s_pats_in_its_tenant_s_schema(
    store: CredentialStore, tenants: TenantDatabase
) -> None:
    alice = ensure(store, ALICE, tenants.new_user(TENANT_A), TENANT_A)
    bob = ensure(store, BOB, tenants.new_user(TENANT_B), TENANT_B)

    rows = rows_of_cluster(store, CLUSTER)
    assert [(row.name, row.tenant_id) for row in rows] == [("alice", TENANT_A), ("bob", TENANT_B)]
    assert revoke_orphan(store, rows[1])

    assert not tenants.authenticates(TENANT_B, bob.token)
    assert tenants.authenticates(TENANT_A, alice.token)


def test_a_row_left_by_a_sandbox_of_another_tenant_has_its_pat_revoked_in_that_tenant(
    store: CredentialStore, tenants: TenantDatabase
) -> None:
    earlier = ensure(store, ALICE, tenants.new_user(TENANT_A), TENANT_A)
    ensure(store, BOB, tenants.new_user(TENANT_B), TENANT_B)  # PAT 1 of tenant B, live
    reborn = SandboxIdentity(ALICE.namespace, ALICE.name, "another-uid")

    issued = ensure(store, reborn, tenants.new_user(TENANT_B), TENANT_B)

    assert issued.minted
    assert issued.superseded_pat_id == earlier.pat_id
    assert not tenants.authenticates(TENANT_A, earlier.token)
    assert [pat.is_revoked for pat in tenants.pats(TENANT_B)] == [False, False]
    assert tenants.authenticates(TENANT_B, issued.token)


@pytest.mark.parametrize("schema_exists", [True, False])
def test_a_tenant_whose_schema_lacks_onyx_tables_is_a_schema_error_naming_it(
    store: CredentialStore, tenants: TenantDatabase, schema_exists: bool
) -> None:
    if schema_exists:
        with tenants.engine.begin() as connection:
            connection.execute(sa.text('CREATE SCHEMA "tenant_c"'))

    with pytest.raises(SchemaMissingError, match="schema 'tenant_c'") as raised:
        ensure(store, ALICE, uuid.uuid4(), "tenant_c")

    if schema_exists:
        assert "'personal_access_token'" in str(raised.value)
    else:
        assert isinstance(raised.value, TenantGoneError)
    assert tenants.rows() == []


def test_a_tenant_without_a_schema_leaves_nothing_of_it_kept_in_memory(
    store: CredentialStore, tenants: TenantDatabase
) -> None:
    """A spec may name any tenant id: tables made for each would be kept for good."""
    tenant_tables.cache_clear()
    for index in range(3):
        with pytest.raises(TenantGoneError):
            ensure(store, ALICE, uuid.uuid4(), f"nobody_{index}")

    assert tenant_tables.cache_info().currsize == 0


@pytest.mark.parametrize("tenant", ["acme.corp", 'a"b', "a b", "tenant_a;", "", "x" * 64])
def test_a_tenant_id_that_cannot_name_a_schema_is_refused(
    store: CredentialStore, tenants: TenantDatabase, tenant: str
) -> None:
    with pytest.raises(CredentialsError, match="cannot name a tenant's schema"):
        ensure(store, ALICE, tenants.new_user(TENANT_A), tenant)

    assert tenants.rows() == []
    assert tenants.pats(TENANT_A) == []


def test_each_tenant_s_schema_is_checked_once(
    store: CredentialStore, tenants: TenantDatabase
) -> None:
    user = tenants.new_user(TENANT_A)
    ensure(store, ALICE, user, TENANT_A)
    looked_up: list[str] = []

    def record(*args: Any) -> None:
        statement = args[2]
        if "pg_catalog" in statement or "information_schema" in statement:
            looked_up.append(statement)

    sa.event.listen(tenants.engine, "before_cursor_execute", record)
    try:
        ensure(store, ALICE, user, TENANT_A, force_new=True)
        store.show(ALICE.namespace, ALICE.name)
    finally:
        sa.event.remove(tenants.engine, "before_cursor_execute", record)

    assert looked_up == []


def test_the_schema_checks_do_not_look_for_onyx_tables_in_the_default_schema(
    tenants: TenantDatabase,
) -> None:
    check_schema(tenants.engine, multi_tenant=True)
    assert upgrade(tenants.engine, multi_tenant=True).onyx_mode

    with pytest.raises(SchemaMissingError, match="missing from the database"):
        check_schema(tenants.engine)


def test_the_settings_build_a_multi_tenant_store(
    tenants: TenantDatabase, key_entry: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CRAFT_DATABASE_URL", tenants.url)
    monkeypatch.setenv("CRAFT_ENCRYPTION_KEYS", key_entry)
    monkeypatch.setenv("CRAFT_CLUSTER_ID", CLUSTER)
    monkeypatch.setenv("CRAFT_ONYX_MULTI_TENANT", "true")

    for migrate in (True, False):
        store = build_credential_store(load_settings(), migrate=migrate)
        try:
            issued = ensure(store, ALICE, tenants.new_user(TENANT_B), TENANT_B)
            assert tenants.authenticates(TENANT_B, issued.token)
        finally:
            store.close()


def test_multi_tenant_mode_is_refused_on_the_embedded_database(
    keyring: KeyRing, tmp_path: Any
) -> None:
    engine = create_credentials_engine(f"sqlite:///{tmp_path / 'credentials.db'}")
    try:
        with pytest.raises(CredentialsError, match="CRAFT_ONYX_MULTI_TENANT"):
            upgrade(engine, multi_tenant=True)
        with pytest.raises(CredentialsError, match="no tenant schemas"):
            CredentialStore(engine, keyring, multi_tenant=True)
    finally:
        engine.dispose()


def test_with_the_setting_off_every_tenant_uses_the_default_schema(
    postgres_server: ThrowawayPostgres, keyring: KeyRing, clock: Clock
) -> None:
    engine = create_credentials_engine(tenant_schemas(postgres_server, default_tables=True))
    upgrade(engine)
    store = CredentialStore(engine, keyring, clock=clock, cluster_id=CLUSTER)
    database = TenantDatabase("", engine)
    try:
        issued = ensure(store, ALICE, add_user(engine), TENANT_A)
        assert [pat.id for pat in database.pats(None)] == [issued.pat_id]
        assert database.pats(TENANT_A) == []
        assert store.revoke(ALICE)
        assert database.pats(None)[0].is_revoked
        with pytest.raises(UserNotFoundError):  # the tenant's users are not looked at
            ensure(store, BOB, database.new_user(TENANT_B), TENANT_B)
    finally:
        store.close()
        engine.dispose()


def test_tenant_tables_are_the_declared_tables_in_the_tenant_s_schema() -> None:
    tables = tenant_tables(TENANT_A)

    assert isinstance(tables, OnyxTables)
    assert (tables.pat.schema, tables.user.schema) == (TENANT_A, TENANT_A)
    assert [c.name for c in tables.pat.columns] == [c.name for c in DEFAULT_TABLES.pat.columns]
    assert {fk.target_fullname for fk in tables.pat.foreign_keys} == {f"{TENANT_A}.user.id"}
    assert tenant_tables(TENANT_A) is tables
    assert DEFAULT_TABLES.pat.schema is None


def test_db_upgrade_and_credentials_revoke_work_in_multi_tenant_mode(
    postgres_server: ThrowawayPostgres, key_entry: str, keyring: KeyRing
) -> None:
    url = tenant_schemas(postgres_server)
    env = {
        "CRAFT_DATABASE_URL": url,
        "CRAFT_ENCRYPTION_KEYS": key_entry,
        "CRAFT_CLUSTER_ID": CLUSTER,
        "CRAFT_ONYX_MULTI_TENANT": "true",
    }

    upgraded = CliRunner().invoke(main, ["db", "upgrade"], env=env, catch_exceptions=False)

    assert upgraded.exit_code == 0, upgraded.output
    assert "craft_sandbox_credential: migrated from revision none" in upgraded.output
    engine = create_credentials_engine(url)
    database = TenantDatabase(url, engine)
    store = CredentialStore(engine, keyring, cluster_id=CLUSTER, multi_tenant=True)
    try:
        issued = ensure(store, ALICE, database.new_user(TENANT_B), TENANT_B)
        revoked = CliRunner().invoke(
            main, ["credentials", "revoke", "team-a/alice"], env=env, catch_exceptions=False
        )
        assert revoked.exit_code == 0, revoked.output
        assert not database.authenticates(TENANT_B, issued.token)
    finally:
        store.close()
        engine.dispose()


def human_pat(tenants: TenantDatabase, tenant: str, user: uuid.UUID) -> int:
    """A person's own USER PAT in ``tenant``'s schema, live for 30 days; its id."""
    pat = tenant_tables(tenant).pat
    now = datetime.now(UTC)
    values = {
        "name": "a laptop",
        "hashed_token": hash_token(f"onyx_pat_human_{uuid.uuid4()}"),
        "token_display": "onyx_pat_hum****xxxx",
        "user_id": user,
        "expires_at": now + timedelta(days=30),
        "created_at": now,
        "is_revoked": False,
        "pat_type": "USER",
        "scopes": None,
    }
    with tenants.engine.begin() as connection:
        return int(
            connection.execute(sa.insert(pat).values(values).returning(pat.c.id)).scalar_one()
        )


def test_a_pat_of_another_user_under_the_rows_pat_id_is_never_touched(
    make_store: Callable[..., CredentialStore], tenants: TenantDatabase
) -> None:
    # A row whose PAT is in another schema (minted before the setting was on, say) names a
    # PAT id that, in the tenant's schema, is someone else's own PAT: ids restart per schema.
    user = tenants.new_user(TENANT_A)
    before = make_store(multi_tenant=False)
    create_onyx_tables(tenants.engine)  # the default schema, as single-tenant Onyx has it
    add_user(tenants.engine, user_id=user)
    issued = before.ensure(ALICE, user_id=user, tenant_id=TENANT_A, lifetime=LIFETIME)
    other = human_pat(tenants, TENANT_A, tenants.new_user(TENANT_A))
    assert other == issued.pat_id

    store = make_store()
    again = ensure(store, ALICE, user, TENANT_A)
    store.revoke_named(ALICE.namespace, ALICE.name)

    assert again.minted, "the row's PAT reads as gone from the tenant's schema"
    foreign = tenants.pat(TENANT_A, other)
    assert not foreign.is_revoked
    assert foreign.expires_at > datetime.now(UTC) + timedelta(days=29)


@pytest.mark.parametrize("fresh_store", [True, False], ids=["after a restart", "same process"])
def test_a_sandbox_of_a_tenant_onyx_deleted_is_revoked_and_forgotten(
    make_store: Callable[..., CredentialStore], tenants: TenantDatabase, fresh_store: bool
) -> None:
    # Onyx drops a deleted tenant's schema, its PATs with it: the finalizer, the CLI and the
    # orphan sweep must let go of the rows, not fail for ever (the sandbox never deleted).
    carol = SandboxIdentity("team-c", "carol", "6c1f5a52-0000-4000-8000-00000000000c")
    store = make_store()
    for sandbox in (ALICE, BOB, carol):
        ensure(store, sandbox, tenants.new_user(TENANT_A), TENANT_A)
    with tenants.engine.begin() as connection:
        connection.execute(sa.text(f'DROP SCHEMA "{TENANT_A}" CASCADE'))
    if fresh_store:
        store = make_store()

    assert not store.revoke(ALICE), "the finalizer: nothing revoked, the row forgotten"
    forgotten = store.revoke_named(BOB.namespace, BOB.name)  # credentials revoke
    assert forgotten is not None
    assert forgotten.forgotten is Forgotten.TENANT_GONE
    [left] = rows_of_cluster(store, CLUSTER)
    assert revoke_orphan(store, left) is Revocation.NOTHING  # the orphan sweep: forgotten
    assert tenants.rows() == []


def test_a_row_whose_tenant_has_no_schema_while_the_default_has_onyxs_is_never_forgotten(
    make_store: Callable[..., CredentialStore], tenants: TenantDatabase
) -> None:
    # Minted before multi-tenant mode (its PAT in the default schema, live), its tenant
    # without a schema here: an id alone cannot tell which default-schema PAT is the row's,
    # so nothing is revoked nor forgotten; it is said, with the way out.
    create_onyx_tables(tenants.engine)
    user = add_user(tenants.engine)
    before = make_store(multi_tenant=False)
    before.ensure(ALICE, user_id=user, tenant_id="tenant_c", lifetime=LIFETIME)

    with pytest.raises(TenantGoneError, match="revoke it with the setting off"):
        make_store().revoke(ALICE)

    [pat] = tenants.pats(None)
    assert not pat.is_revoked
    assert tenants.rows() == [("alice", "tenant_c")]
    assert before.revoke(ALICE), "with the setting off, as the message says"


# A tenant's schema recreated or restored while the operator's table is not: PAT ids start
# again, so a row may name the id of another sandbox's new PAT (of the same user). Only the
# PAT named after the row's sandbox, created with the row, is the row's.


def untouched(tenants: TenantDatabase, issued: Any) -> bool:
    """Whether the PAT ``issued`` in TENANT_A is as it was minted: not revoked, its expiry
    unchanged (Onyx's server goes by the expiry)."""
    pat = tenants.pat(TENANT_A, issued.pat_id)
    return bool(not pat.is_revoked and pat.expires_at == issued.expires_at)


def recreated_with_bob_holding_alice_s_pat_id(
    store: CredentialStore, tenants: TenantDatabase, user: uuid.UUID
) -> tuple[Any, Any]:
    """Alice and Bob (one user) minted in TENANT_A, the schema recreated, Bob's new PAT
    minted under Alice's PAT id; Alice's first PAT and Bob's new one."""
    alice = ensure(store, ALICE, user, TENANT_A)
    ensure(store, BOB, user, TENANT_A)
    tenants.recreate(TENANT_A, user)
    bob = ensure(store, BOB, user, TENANT_A)
    assert (bob.minted, bob.pat_id) == (True, alice.pat_id)
    return alice, bob


def test_a_mint_after_a_tenant_s_schema_was_recreated_leaves_another_s_pat_of_the_old_id_live(
    store: CredentialStore, tenants: TenantDatabase
) -> None:
    user = tenants.new_user(TENANT_A)
    _, bob = recreated_with_bob_holding_alice_s_pat_id(store, tenants, user)

    alice = ensure(store, ALICE, user, TENANT_A)

    assert alice.minted
    assert alice.superseded_pat_id is None
    assert untouched(tenants, bob)
    assert tenants.authenticates(TENANT_A, alice.token)


def test_credentials_show_reads_a_pat_of_another_sandbox_under_the_row_s_pat_id_as_missing(
    store: CredentialStore, tenants: TenantDatabase
) -> None:
    user = tenants.new_user(TENANT_A)
    recreated_with_bob_holding_alice_s_pat_id(store, tenants, user)

    shown = store.show(ALICE.namespace, ALICE.name)

    assert shown is not None
    assert shown.pat_state is PatState.MISSING


def test_deleting_a_sandbox_after_its_schema_was_recreated_leaves_another_s_pat_of_its_id_live(
    store: CredentialStore, tenants: TenantDatabase
) -> None:
    user = tenants.new_user(TENANT_A)
    _, bob = recreated_with_bob_holding_alice_s_pat_id(store, tenants, user)

    assert store.revoke(ALICE)  # the finalizer: the row goes, nothing of Bob's

    assert tenants.rows() == [("bob", TENANT_A)]
    assert untouched(tenants, bob)
    assert store.revoke_named(BOB.namespace, BOB.name) is not None  # credentials revoke
    assert not tenants.authenticates(TENANT_A, bob.token)


def test_the_orphan_sweep_after_a_schema_was_recreated_leaves_another_s_pat_of_its_id_live(
    store: CredentialStore, tenants: TenantDatabase
) -> None:
    user = tenants.new_user(TENANT_A)
    _, bob = recreated_with_bob_holding_alice_s_pat_id(store, tenants, user)
    [alice_row] = [row for row in rows_of_cluster(store, CLUSTER) if row.name == ALICE.name]

    assert revoke_orphan(store, alice_row) is Revocation.NOT_IN_ONYX

    assert untouched(tenants, bob)


def _retire(store: CredentialStore, user: uuid.UUID, pat_id: int) -> None:
    assert store.retire(ALICE, pat_id) is None


def _mint(store: CredentialStore, user: uuid.UUID, pat_id: int) -> None:
    assert ensure(store, ALICE, user, TENANT_A).minted


def _delete(store: CredentialStore, user: uuid.UUID, pat_id: int) -> None:
    assert store.revoke(ALICE)


def _sweep(store: CredentialStore, user: uuid.UUID, pat_id: int) -> None:
    [row] = [row for row in rows_of_cluster(store, CLUSTER) if row.name == ALICE.name]
    assert revoke_orphan(store, row)


@pytest.mark.parametrize("then", [_retire, _mint, _delete, _sweep], ids=lambda f: f.__name__)
def test_a_grace_pat_id_naming_another_s_pat_after_a_recreated_schema_is_never_revoked(
    store: CredentialStore, tenants: TenantDatabase, clock: Clock, then: Callable[..., None]
) -> None:
    user = tenants.new_user(TENANT_A)
    ensure(store, ALICE, user, TENANT_A)
    clock.advance(INTO_WINDOW)
    renewed = ensure(store, ALICE, user, TENANT_A)  # PAT 2, PAT 1 in its grace period
    tenants.recreate(TENANT_A, user)
    bob = ensure(store, BOB, user, TENANT_A)  # PAT 1 again: Bob's
    assert bob.pat_id == renewed.grace_pat_id

    then(store, user, renewed.pat_id)  # the pod was seen using PAT 2, or Alice re-mints or goes

    assert untouched(tenants, bob)


def test_a_namesake_s_pat_of_another_cluster_under_the_row_s_pat_id_is_not_the_row_s(
    make_store: Callable[..., CredentialStore], tenants: TenantDatabase, clock: Clock
) -> None:
    # Two clusters sharing Onyx's database, each with a sandbox team-a/alice of one user:
    # after the schema is recreated, west's PAT has east's id and east's PAT's name, but
    # was not created with east's row.
    user = tenants.new_user(TENANT_A)
    east, west = make_store(), make_store(cluster_id="west")
    earlier = ensure(east, ALICE, user, TENANT_A)
    tenants.recreate(TENANT_A, user)
    clock.advance(timedelta(seconds=1))
    theirs = ensure(west, ALICE, user, TENANT_A)
    assert theirs.pat_id == earlier.pat_id

    ours = ensure(east, ALICE, user, TENANT_A)
    assert east.revoke(ALICE)

    assert ours.minted
    assert ours.superseded_pat_id is None
    assert untouched(tenants, theirs)


def test_the_orphan_sweep_leaves_another_cluster_s_pat_of_the_same_name_and_id_live(
    make_store: Callable[..., CredentialStore], tenants: TenantDatabase, clock: Clock
) -> None:
    """Another cluster's sandbox of the same name and user minted, after the schema was
    recreated, a PAT under the id the gone sandbox's row names: only the PAT created
    with the row is the row's."""
    user = tenants.new_user(TENANT_A)
    east, west = make_store(), make_store(cluster_id="west")
    gone = ensure(east, ALICE, user, TENANT_A)
    tenants.recreate(TENANT_A, user)
    clock.advance(timedelta(minutes=1))
    theirs = ensure(west, ALICE, user, TENANT_A)
    assert (theirs.minted, theirs.pat_id) == (True, gone.pat_id)
    [row] = rows_of_cluster(east, CLUSTER)

    assert revoke_orphan(east, row)

    assert untouched(tenants, theirs)
    assert tenants.authenticates(TENANT_A, theirs.token)
