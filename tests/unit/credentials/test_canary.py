"""Canary: no log record, exception message or repr ever carries a token, a key or a password.

The test runs the credential lifecycle with every logger at DEBUG (SQLAlchemy's included),
provokes each typed error, and then searches everything that could reach a log, an event
or a terminal for the secrets it handled.
"""

from __future__ import annotations

import logging
import traceback
from pathlib import Path

import pytest
from click.testing import CliRunner
from sqlalchemy.orm import Session

from craft_operator.cli import main
from craft_operator.config import load_settings
from craft_operator.credentials import (
    CredentialsError,
    KeyRing,
    SandboxIdentity,
    build_credential_store,
    generate_key_entry,
)
from craft_operator.credentials.tables import PersonalAccessToken, SandboxCredential

USER = "3f2b8c1e-9d4a-4e6b-8f0a-1c2d3e4f5a6b"


def _fragments(secret: str) -> list[str]:
    """The secret and a window of it, to catch partial leaks; the display form is allowed."""
    if secret.startswith("onyx_pat_"):
        return [secret, secret[12:40]]
    return [secret, secret[len(secret) // 4 : len(secret) // 4 + 16]]


def test_no_secret_reaches_logs_errors_or_reprs(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    old_entry = generate_key_entry("old").get_secret_value()
    new_entry = generate_key_entry("new").get_secret_value()
    password = "hunter2-canary-password"
    secrets = [old_entry.split(":")[1], new_entry.split(":")[1], password]
    seen: list[str] = []
    caplog.set_level(logging.DEBUG)

    settings = load_settings(state_dir=tmp_path, encryption_keys=old_entry)
    store = build_credential_store(settings)
    alice = SandboxIdentity("team-a", "alice", "uid-alice")
    bob = SandboxIdentity("team-a", "bob", "uid-bob")
    issued = [
        store.ensure(alice, user_id=USER, tenant_id="public"),
        store.ensure(alice, user_id=USER, tenant_id="public"),
        store.ensure(alice, user_id=USER, tenant_id="acme", force_new=True),
        store.ensure(bob, user_id=USER, tenant_id="public"),
    ]
    secrets += [credential.token.get_secret_value() for credential in issued]
    seen += [repr(credential) for credential in issued] + [str(c) for c in issued]
    seen += [repr(store.show("team-a", "alice")), repr(store), repr(store.keyring)]

    rotated_store = build_credential_store(
        load_settings(state_dir=tmp_path, encryption_keys=f"{new_entry},{old_entry}")
    )
    seen.append(repr(rotated_store.rotate(batch_size=1)))
    stranger = build_credential_store(
        load_settings(
            state_dir=tmp_path, encryption_keys=generate_key_entry("x").get_secret_value()
        )
    )
    impostor_entry = generate_key_entry("new").get_secret_value()
    secrets.append(impostor_entry.split(":")[1])
    impostor = build_credential_store(
        load_settings(state_dir=tmp_path, encryption_keys=impostor_entry)
    )
    # Another key of the same id cannot open alice's token: it revokes it and mints
    # another (and logs why).
    replaced = impostor.ensure(alice, user_id=USER, tenant_id="acme")
    assert replaced.minted
    assert replaced.reason
    secrets.append(replaced.token.get_secret_value())
    seen += [repr(replaced), replaced.reason]
    errors: list[BaseException] = []
    for attempt in (
        # The stranger's ring lacks the key id of alice's token: it says so, in an error.
        lambda: stranger.ensure(alice, user_id=USER, tenant_id="acme"),
        lambda: stranger.ensure(alice, user_id="not-a-uuid", tenant_id="public"),
        lambda: KeyRing.parse(f"broken:{old_entry.split(':')[1][:-4]}"),
        lambda: load_settings(encryption_keys=f"k:{old_entry.split(':')[1][:-4]}"),
        lambda: load_settings(database_url=f"postgresql://u:{password}@h/db", metrics_port=-1),
    ):
        try:
            attempt()
        except Exception as exc:
            errors.append(exc)
    assert len(errors) == 5
    assert any(isinstance(error, CredentialsError) for error in errors)
    for error in errors:
        seen += [str(error), repr(error), "".join(traceback.format_exception_only(error))]

    with Session(store.engine) as session:
        seen += [repr(row) for row in session.query(PersonalAccessToken).all()]
        seen += [repr(row) for row in session.query(SandboxCredential).all()]

    with_password = load_settings(
        state_dir=tmp_path,
        encryption_keys=new_entry,
        database_url=f"postgresql+psycopg://craft:{password}@db:5432/onyx",
    )
    seen += [repr(with_password), str(with_password), with_password.model_dump_json()]
    seen += [repr(settings), str(settings)]

    env = {"CRAFT_STATE_DIR": str(tmp_path), "CRAFT_ENCRYPTION_KEYS": f"{new_entry},{old_entry}"}
    for args in (
        ["credentials", "show", "team-a/alice"],
        ["credentials", "show", "team-a/alice", "-o", "json"],
        ["credentials", "revoke", "team-a/alice"],
        ["keys", "rotate"],
        ["db", "upgrade"],
    ):
        seen.append(CliRunner().invoke(main, args, env=env).output)
    store.revoke(bob)
    for each in (store, rotated_store, stranger, impostor):
        each.close()

    for record in caplog.records:
        seen.append(record.getMessage())
        if record.exc_info:
            seen.append("".join(traceback.format_exception(*record.exc_info)))
    assert len(caplog.records) > 10  # the lifecycle did log (SQLAlchemy included)
    haystack = "\n".join(seen)
    for secret in secrets:
        for fragment in _fragments(secret):
            assert fragment not in haystack, "a secret leaked"
