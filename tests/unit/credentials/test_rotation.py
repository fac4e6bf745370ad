"""Key rotation: re-encrypt everything under the new key, in resumable batches."""

from __future__ import annotations

import uuid
from collections.abc import Callable

import pytest
from sqlalchemy import select, update

from craft_operator.credentials import (
    CredentialStore,
    KeyRing,
    SandboxIdentity,
    generate_key_entry,
)
from craft_operator.credentials.tables import SandboxCredential

from .conftest import Database

SANDBOXES = [SandboxIdentity("team-a", f"box-{n:03}", f"uid-{n}") for n in range(100)]


class RotationInterruptedError(Exception):
    """Stands in for a ^C or a killed pod between two batches."""


def _fill(store: CredentialStore, database: Database) -> tuple[dict[str, str], uuid.UUID]:
    """Mint a PAT for each of the 100 sandboxes; their tokens by sandbox name."""
    user = database.new_user()
    tokens = {}
    for sandbox in SANDBOXES:
        issued = store.ensure(sandbox, user_id=user, tenant_id="public")
        tokens[sandbox.name] = issued.token.get_secret_value()
    return tokens, user


def test_after_rotation_the_old_key_can_be_dropped(
    make_store: Callable[..., CredentialStore], database: Database, key_entry: str
) -> None:
    tokens, user = _fill(make_store(), database)
    new_entry = generate_key_entry("k2").get_secret_value()
    rotating = make_store(KeyRing.parse(f"{new_entry},{key_entry}"))

    result = rotating.rotate(batch_size=30)

    assert (result.key_id, result.changed, result.failures) == ("k2", 100, ())
    assert rotating.key_ids_in_use() == {"k2": 100}
    only_new = make_store(KeyRing.parse(new_entry))
    for sandbox in SANDBOXES:
        issued = only_new.ensure(sandbox, user_id=user, tenant_id="public")
        assert not issued.minted
        assert issued.token.get_secret_value() == tokens[sandbox.name]


def test_an_interrupted_rotation_resumes_where_it_stopped(
    make_store: Callable[..., CredentialStore], database: Database, key_entry: str
) -> None:
    _fill(make_store(), database)
    rotating = make_store(
        KeyRing.parse(f"{generate_key_entry('k2').get_secret_value()},{key_entry}")
    )

    def stop_after_first_batch(done: int) -> None:
        raise RotationInterruptedError

    with pytest.raises(RotationInterruptedError):
        rotating.rotate(batch_size=40, progress=stop_after_first_batch)
    assert rotating.key_ids_in_use() == {"k2": 40, "k1": 60}

    resumed = rotating.rotate(batch_size=40)

    assert resumed.changed == 60
    assert rotating.key_ids_in_use() == {"k2": 100}
    assert rotating.rotate().changed == 0


def test_a_token_that_cannot_be_decrypted_is_reported_and_left_alone(
    make_store: Callable[..., CredentialStore], database: Database, key_entry: str
) -> None:
    user = database.new_user()
    make_store(KeyRing.parse(generate_key_entry("lost").get_secret_value())).ensure(
        SANDBOXES[0], user_id=user, tenant_id="public"
    )
    make_store().ensure(SANDBOXES[1], user_id=user, tenant_id="public")
    rotating = make_store(
        KeyRing.parse(f"{generate_key_entry('k2').get_secret_value()},{key_entry}")
    )

    result = rotating.rotate()

    assert result.changed == 1
    assert len(result.failures) == 1
    assert "'lost'" in result.failures[0]
    assert "box-000" in result.failures[0]
    assert rotating.key_ids_in_use() == {"k2": 1, "lost": 1}


def forget_clusters(database: Database, names: list[str]) -> None:
    """Make these sandboxes' rows ones written before cluster ids were recorded."""
    with database.engine.begin() as connection:
        connection.execute(
            update(SandboxCredential)
            .where(SandboxCredential.name.in_(names))
            .values(cluster_id=None)
        )


def test_rows_without_a_cluster_id_are_not_rotated_but_counted_by_key(
    make_store: Callable[..., CredentialStore], database: Database, key_entry: str
) -> None:
    user = database.new_user()
    for sandbox in SANDBOXES[:5]:
        make_store().ensure(sandbox, user_id=user, tenant_id="public")
    forget_clusters(database, ["box-000", "box-001"])
    rotating = make_store(
        KeyRing.parse(f"{generate_key_entry('k2').get_secret_value()},{key_entry}")
    )

    result = rotating.rotate()
    usage = rotating.key_usage()

    assert result.changed == 3
    assert usage.by_key == {"k2": 3}
    assert usage.unclaimed_by_key == {"k1": 2}
    assert rotating.key_ids_in_use() == {"k2": 3}


def test_a_malformed_envelope_header_is_named_not_raised(
    make_store: Callable[..., CredentialStore], database: Database
) -> None:
    store = make_store()
    user = database.new_user()
    for sandbox in SANDBOXES[:3]:
        store.ensure(sandbox, user_id=user, tenant_id="public")
    with database.engine.begin() as connection:
        connection.execute(
            update(SandboxCredential)
            .where(SandboxCredential.name == "box-001")
            .values(encrypted_token=b"\x07junk")
        )

    usage = store.key_usage()

    assert usage.malformed == ("team-a/box-001",)
    assert usage.by_key == {"k1": 2}
    assert store.key_ids_in_use() == {"k1": 2}


def test_a_sample_of_each_key_s_tokens_is_opened_and_failures_named(
    make_store: Callable[..., CredentialStore], database: Database, key_entry: str
) -> None:
    user = database.new_user()
    make_store().ensure(SANDBOXES[0], user_id=user, tenant_id="public")
    sealing = make_store(KeyRing.parse(generate_key_entry("k2").get_secret_value()))
    for sandbox in SANDBOXES[1:6]:
        sealing.ensure(sandbox, user_id=user, tenant_id="public")
    # Another key that is called k2 too: k1's token opens, none of k2's does.
    impostor = generate_key_entry("k2").get_secret_value()
    checker = make_store(KeyRing.parse(f"{impostor},{key_entry}"))

    usage = checker.key_usage(sample_per_key=2)

    assert usage.by_key == {"k1": 1, "k2": 5}
    assert usage.sampled == 3
    assert usage.undecryptable == (("team-a/box-001", "k2"), ("team-a/box-002", "k2"))


def test_rows_held_by_another_writer_are_skipped_counted_and_taken_by_the_next_run(
    make_store: Callable[..., CredentialStore], database: Database, key_entry: str
) -> None:
    if not database.onyx_mode:
        pytest.skip("SQLite has one writer at a time: a rotation waits, it never skips a row")
    user = database.new_user()
    for sandbox in SANDBOXES[:6]:
        make_store().ensure(sandbox, user_id=user, tenant_id="public")
    rotating = make_store(
        KeyRing.parse(f"{generate_key_entry('k2').get_secret_value()},{key_entry}")
    )
    table = SandboxCredential.__table__

    with database.engine.connect() as holder, holder.begin():
        holder.execute(  # an operator minting for two sandboxes holds their rows
            select(table.c.id).where(table.c.name.in_(["box-001", "box-005"])).with_for_update()
        ).all()
        held = rotating.rotate(batch_size=2)

    assert (held.changed, held.busy, held.failures) == (4, 2, ())
    assert rotating.key_ids_in_use() == {"k2": 4, "k1": 2}
    again = rotating.rotate(batch_size=2)
    assert (again.changed, again.busy) == (2, 0)
    assert rotating.key_ids_in_use() == {"k2": 6}
