"""``keys rotate`` says plainly which old keys can be dropped (rows without a cluster id
count) and when (once every operator replica encrypts with the new key), names rows it
cannot read and rows it had to skip; the credential commands never migrate the schema."""

from __future__ import annotations

from pathlib import Path

import pytest
import sqlalchemy as sa
from click.testing import CliRunner, Result

from craft_operator.cli import main
from craft_operator.config import load_settings
from craft_operator.credentials import (
    SandboxIdentity,
    build_credential_store,
    generate_key_entry,
)
from craft_operator.credentials.db import VERSION_TABLE, head_revision
from craft_operator.credentials.rotation import RotationReport
from craft_operator.credentials.store import CredentialStore
from craft_operator.credentials.tables import SandboxCredential

USER = "3f2b8c1e-9d4a-4e6b-8f0a-1c2d3e4f5a6b"
K1 = generate_key_entry("k1").get_secret_value()
K2 = generate_key_entry("k2").get_secret_value()


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    """An embedded database in ``tmp_path``, its tokens sealed with k1."""
    return {"CRAFT_STATE_DIR": str(tmp_path), "CRAFT_ENCRYPTION_KEYS": K1}


def run(env: dict[str, str], *args: str) -> Result:
    return CliRunner().invoke(main, list(args), env=env, catch_exceptions=False)


def mint(env: dict[str, str], *names: str) -> None:
    """A PAT for each sandbox ``team-a/<name>`` (migrating the database first)."""
    settings = load_settings(
        state_dir=Path(env["CRAFT_STATE_DIR"]), encryption_keys=env["CRAFT_ENCRYPTION_KEYS"]
    )
    store = build_credential_store(settings)
    try:
        for name in names:
            sandbox = SandboxIdentity("team-a", name, f"uid-{name}")
            store.ensure(sandbox, user_id=USER, tenant_id="public")
    finally:
        store.close()


def database(env: dict[str, str]) -> sa.Engine:
    return sa.create_engine(f"sqlite:///{env['CRAFT_STATE_DIR']}/craft-operator.db")


def change_rows(env: dict[str, str], names: list[str], **values: object) -> None:
    engine = database(env)
    with engine.begin() as connection:
        connection.execute(
            sa.update(SandboxCredential).where(SandboxCredential.name.in_(names)).values(**values)
        )
    engine.dispose()


def test_an_old_key_still_sealing_rows_without_a_cluster_id_cannot_be_dropped(
    env: dict[str, str],
) -> None:
    mint(env, "alice", "bob", "carol")
    change_rows(env, ["bob", "carol"], cluster_id=None)  # from before cluster ids

    result = run({**env, "CRAFT_ENCRYPTION_KEYS": f"{K2},{K1}"}, "keys", "rotate")

    assert result.exit_code == 0, result.output
    assert "re-encrypted 1 stored token(s) under key 'k2'" in result.output
    assert "stored tokens by key: k2: 1" in result.output
    assert "rows without a cluster id (from before cluster ids, not rotated) by key: k1: 2" in (
        result.output
    )
    assert "key 'k1' cannot be dropped from the ring yet: 2 row(s) without a cluster id" in (
        result.output
    )
    assert "craft-operator credentials adopt" in result.output
    assert "no stored token uses key(s)" not in result.output
    assert "they can be dropped from the ring" not in result.output


def test_an_old_key_no_row_uses_can_go_once_every_replica_encrypts_with_the_new_one(
    env: dict[str, str],
) -> None:
    mint(env, "alice")

    result = run({**env, "CRAFT_ENCRYPTION_KEYS": f"{K2},{K1}"}, "keys", "rotate")

    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[-3:] == [
        "no stored token uses key(s) k1 now",
        "they can be dropped from the ring once every operator replica encrypts with 'k2' "
        "and a run of this after that still finds no token under them (a replica still on "
        "the old ring seals new tokens under them)",
        "a replica encrypts with the first key of its own ring: with "
        "CRAFT_ENCRYPTION_KEYS_FILE, of that file in its pod, re-read before each seal (run "
        "this command there: it re-encrypts under that key); with CRAFT_ENCRYPTION_KEYS, of "
        "the ring it was started with",
    ]
    assert "cannot be dropped" not in result.output


def sandbox(name: str) -> SandboxIdentity:
    return SandboxIdentity("team-a", name, f"uid-{name}")


def test_a_pat_the_running_operator_mints_right_after_a_rotation_is_sealed_under_the_new_key(
    tmp_path: Path,
) -> None:
    # The operator reads its ring from a Secret volume and is not restarted. On-call puts
    # k2 first in the Secret and, once the volume shows it, runs keys rotate in the
    # operator's pod (the same file); a sandbox created a moment later gets a PAT.
    keys = tmp_path / "keys"
    keys.write_text(f"{K1}\n", encoding="utf-8")
    env = {"CRAFT_STATE_DIR": str(tmp_path), "CRAFT_ENCRYPTION_KEYS_FILE": str(keys)}
    settings = load_settings(state_dir=tmp_path, encryption_keys_file=keys)
    operator = build_credential_store(settings)
    try:
        operator.ensure(sandbox("alice"), user_id=USER, tenant_id="public")
        keys.write_text(f"{K2}\n{K1}\n", encoding="utf-8")  # the kubelet updates the volume
        rotated = run(env, "keys", "rotate")
        operator.ensure(sandbox("bob"), user_id=USER, tenant_id="public")
        sealed = operator.key_ids_in_use()
        again = run(env, "keys", "rotate")
    finally:
        operator.close()
    keys.write_text(f"{K2}\n", encoding="utf-8")  # k1 dropped, the operator restarted
    restarted = build_credential_store(settings)
    try:
        bob = restarted.ensure(sandbox("bob"), user_id=USER, tenant_id="public")
    finally:
        restarted.close()

    assert "re-encrypted 1 stored token(s) under key 'k2'" in rotated.output
    assert sealed == {"k2": 2}
    assert "re-encrypted 0 stored token(s) under key 'k2'" in again.output
    assert "no stored token uses key(s) k1 now" in again.output
    assert not bob.minted


def test_rows_with_an_unreadable_envelope_header_are_named_and_the_rest_counted(
    env: dict[str, str],
) -> None:
    mint(env, "alice", "bob")
    change_rows(env, ["bob"], encrypted_token=b"\x07not an envelope")

    result = run({**env, "CRAFT_ENCRYPTION_KEYS": f"{K2},{K1}"}, "keys", "rotate")

    assert "1 row(s) have an unreadable envelope header: team-a/bob" in result.output
    assert "stored tokens by key: k2: 1" in result.output


def test_rows_another_writer_held_are_counted_and_fail_the_command(
    env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    mint(env, "alice")

    def held_rotation(self: CredentialStore, **_: object) -> RotationReport:
        return RotationReport("k2", 3, (), busy=2)

    monkeypatch.setattr(CredentialStore, "rotate", held_rotation)

    result = run({**env, "CRAFT_ENCRYPTION_KEYS": f"{K2},{K1}"}, "keys", "rotate")

    assert result.exit_code == 1
    assert result.output.splitlines()[-1] == (
        "craft-operator: 2 token(s) were busy (held by another writer, e.g. the operator "
        "renewing them) and were skipped: run again"
    )


def test_credentials_show_never_migrates_an_empty_database(env: dict[str, str]) -> None:
    with database(env).connect():
        pass  # the file, empty
    result = run({**env, "CRAFT_DATABASE_AUTO_MIGRATE": "true"}, "credentials", "show", "a/b")

    assert result.exit_code == 1
    assert result.output.startswith("craft-operator: the embedded database lacks")
    assert "run: craft-operator db upgrade" in result.output
    assert "this command never migrates the schema itself" in result.output
    engine = database(env)
    assert sa.inspect(engine).get_table_names() == []
    engine.dispose()


def test_credentials_show_stops_on_an_older_schema_and_leaves_it_as_it_is(
    env: dict[str, str],
) -> None:
    mint(env, "alice")
    engine = database(env)
    with engine.begin() as connection:
        connection.execute(sa.text(f"UPDATE {VERSION_TABLE} SET version_num = '0003_library_sync'"))

    result = run(env, "credentials", "show", "team-a/alice")

    assert result.exit_code == 1
    assert (
        f"is at revision 0003_library_sync, this operator needs {head_revision()}" in result.output
    )
    assert "this command never migrates the schema itself" in result.output
    with engine.connect() as connection:
        revision = connection.execute(sa.text(f"SELECT version_num FROM {VERSION_TABLE}"))
        assert revision.scalar_one() == "0003_library_sync"
    engine.dispose()


@pytest.mark.parametrize(
    "command",
    [("credentials", "show", "a/b"), ("credentials", "revoke", "a/b"), ("keys", "rotate")],
)
def test_a_command_pointed_at_a_missing_sqlite_file_creates_nothing(
    env: dict[str, str], tmp_path: Path, command: tuple[str, ...]
) -> None:
    mistyped = tmp_path / "typo" / "credentails.db"

    result = run({**env, "CRAFT_DATABASE_URL": f"sqlite:///{mistyped}"}, *command)

    assert result.exit_code == 1
    assert f"the SQLite database {mistyped} does not exist" in result.output
    assert not mistyped.parent.exists()


def test_rotate_fails_when_the_rings_key_of_the_tokens_id_is_another_key(
    env: dict[str, str],
) -> None:
    # k1 regenerated under the same id: nothing to re-encrypt by id, but no token opens,
    # and the operator would revoke and replace every PAT.
    mint(env, "alice", "bob")
    regenerated = generate_key_entry("k1").get_secret_value()

    result = run({**env, "CRAFT_ENCRYPTION_KEYS": regenerated}, "keys", "rotate")

    assert result.exit_code == 1
    assert "2 of 2 sampled stored token(s) do not open under the ring's key of their id" in (
        result.output
    )
    assert "put the original back" in result.output
    assert regenerated.split(":")[1] not in result.output
