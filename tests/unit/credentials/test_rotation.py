"""Key rotation: re-encrypt everything under the new key, in resumable batches."""

from __future__ import annotations

import uuid
from collections.abc import Callable

import pytest

from craft_operator.credentials import (
    CredentialStore,
    KeyRing,
    SandboxIdentity,
    generate_key_entry,
)

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
