"""A stale key ring: a token sealed under a key the operator's ring lacks is never revoked
or replaced; a ring read from a file (a mounted Secret, updated in place) is re-read once
the file changed (an unchanged one at most once per interval): a token under a key it has
gained is reused, and a new first key seals the very next token."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from pathlib import Path

import pytest
from sqlalchemy import select, update

from craft_operator.credentials import (
    CredentialStore,
    DecryptionError,
    KeyRing,
    KeyRingError,
    SandboxIdentity,
    generate_key_entry,
)
from craft_operator.credentials import keyring as keyring_module
from craft_operator.credentials.errors import KeyNotInRingError
from craft_operator.credentials.keyring import (
    RELOAD_INTERVAL,
    key_ring_from_file,
    parse_header,
)
from craft_operator.credentials.store import UNDECRYPTABLE
from craft_operator.credentials.tables import PersonalAccessToken, SandboxCredential
from craft_operator.reconciler.steps.credentials import failure_reason

from .conftest import Database

SANDBOX = SandboxIdentity("team-a", "alice", "6c1f5a52-0000-4000-8000-000000000001")
NEWER_SANDBOX = SandboxIdentity("team-a", "bob", "6c1f5a52-0000-4000-8000-000000000002")


class Ticker:
    """A monotonic clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def write_ring(path: Path, *entries: str) -> None:
    path.write_text("\n".join(entries) + "\n", encoding="utf-8")


def pat_revoked(database: Database, pat_id: int) -> bool:
    table = PersonalAccessToken.__table__
    with database.engine.connect() as connection:
        return bool(
            connection.execute(select(table.c.is_revoked).where(table.c.id == pat_id)).scalar_one()
        )


def stored_envelope(database: Database) -> bytes:
    with database.engine.connect() as connection:
        envelope: bytes = connection.execute(
            select(SandboxCredential.__table__.c.encrypted_token)
        ).scalar_one()
    return envelope


@pytest.fixture
def k1() -> str:
    return generate_key_entry("k1").get_secret_value()


@pytest.fixture
def k2() -> str:
    return generate_key_entry("k2").get_secret_value()


def test_a_rotation_elsewhere_is_picked_up_from_the_key_ring_file_without_revoking_anything(
    make_store: Callable[..., CredentialStore],
    database: Database,
    tmp_path: Path,
    k1: str,
    k2: str,
) -> None:
    # The operator reads its ring [k1] from a mounted Secret; on-call rotates to [k2, k1]
    # from a shell before the Secret volume has caught up in the operator's pod.
    path, ticker = tmp_path / "keys", Ticker()
    write_ring(path, k1)
    operator = make_store(key_ring_from_file(path, monotonic=ticker))
    user = database.new_user()
    first = operator.ensure(SANDBOX, user_id=user, tenant_id="public")
    make_store(KeyRing.parse(f"{k2},{k1}")).rotate()
    ticker.now += RELOAD_INTERVAL

    with pytest.raises(KeyNotInRingError, match="key 'k2', which is not in the key ring"):
        operator.ensure(SANDBOX, user_id=user, tenant_id="public")
    assert not pat_revoked(database, first.pat_id)

    write_ring(path, k2, k1)  # the kubelet updates the Secret volume
    ticker.now += RELOAD_INTERVAL
    again = operator.ensure(SANDBOX, user_id=user, tenant_id="public")

    assert not again.minted
    assert again.pat_id == first.pat_id
    assert again.token.get_secret_value() == first.token.get_secret_value()
    assert operator.keyring.key_ids == ("k2", "k1")
    assert database.live_pats() == 1


def test_a_changed_key_ring_file_is_re_read_at_once_and_an_unchanged_one_once_per_interval(
    tmp_path: Path, k1: str, k2: str
) -> None:
    path, ticker = tmp_path / "keys", Ticker()
    write_ring(path, k1)
    ring = key_ring_from_file(path, monotonic=ticker)
    write_ring(path, k2, k1)

    changed = ring.reload()
    unchanged = ring.reload()
    ticker.now += RELOAD_INTERVAL
    unchanged_later = ring.reload()

    assert (changed, unchanged, unchanged_later) == (True, False, True)
    assert ring.key_ids == ("k2", "k1")
    assert ring.current_key_id == "k2"


def counting_reads(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """The paths the key ring module reads key ring files from, from now on."""
    reads: list[Path] = []
    read = keyring_module._read_key_file

    def counted(path: Path) -> object:
        reads.append(path)
        return read(path)

    monkeypatch.setattr(keyring_module, "_read_key_file", counted)
    return reads


def test_sealing_with_an_unchanged_key_ring_file_reads_it_at_most_once_per_interval(
    tmp_path: Path, k1: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    path, ticker = tmp_path / "keys", Ticker()
    write_ring(path, k1)
    ring = key_ring_from_file(path, monotonic=ticker)
    reads = counting_reads(monkeypatch)

    for _ in range(5):
        assert sealed_with(ring) == "k1"
    reads_within_the_interval = len(reads)
    ticker.now += RELOAD_INTERVAL
    sealed_with(ring)
    sealed_with(ring)

    assert (reads_within_the_interval, len(reads)) == (0, 1)


def test_an_edit_in_place_that_keeps_size_and_mtime_is_read_once_the_interval_has_passed(
    tmp_path: Path, k1: str
) -> None:
    # A coarse file clock can give an edit in place the mtime the file had: only the
    # interval notices it. A Secret volume's update is a new file, noticed at once.
    path, ticker = tmp_path / "keys", Ticker()
    write_ring(path, k1)
    ring = key_ring_from_file(path, monotonic=ticker)
    before = os.stat(path)
    write_ring(path, generate_key_entry("k9").get_secret_value())  # as long as k1's entry
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))

    soon = sealed_with(ring)
    ticker.now += RELOAD_INTERVAL
    later = sealed_with(ring)

    assert (soon, later) == ("k1", "k9")


def test_a_bad_key_ring_file_keeps_the_ring_and_logs_no_key_material(
    tmp_path: Path, k1: str, caplog: pytest.LogCaptureFixture
) -> None:
    path, ticker = tmp_path / "keys", Ticker()
    write_ring(path, k1)
    ring = key_ring_from_file(path, monotonic=ticker)
    key = k1.split(":")[1]
    write_ring(path, f"{key}:k1")  # written the wrong way round
    ticker.now += RELOAD_INTERVAL

    with caplog.at_level(logging.DEBUG):
        reloaded = ring.reload()

    assert not reloaded
    assert ring.key_ids == ("k1",)
    logged = "\n".join(record.getMessage() for record in caplog.records)
    assert "keeping the key ring as it was" in logged
    assert "key ring entry 1" in logged
    assert key not in logged
    assert key.rstrip("=")[:16] not in logged


def sealed_with(ring: KeyRing) -> str:
    """The key id of a token the ring encrypts now."""
    return parse_header(ring.encrypt(b"a token", context=b"uid"), subject="test")[0]


def test_a_new_first_key_in_the_file_seals_the_very_next_token(
    tmp_path: Path, k1: str, k2: str
) -> None:
    path, ticker = tmp_path / "keys", Ticker()
    write_ring(path, k1)
    ring = key_ring_from_file(path, monotonic=ticker)
    first = sealed_with(ring)
    write_ring(path, k2, k1)  # no token needs k2 yet, and no interval has passed

    assert (first, sealed_with(ring)) == ("k1", "k2")
    assert ring.current_key_id == "k2"


def project_secret(volume: Path, version: str, *entries: str) -> None:
    """Update ``volume`` as the kubelet updates a Secret volume: the ring is written into a
    new directory, and the ``..data`` symlink the ``keys`` symlink goes through is swapped."""
    directory = volume / f"..{version}"
    directory.mkdir()
    write_ring(directory / "keys", *entries)
    swap = volume / "..data_tmp"
    swap.symlink_to(directory.name)
    os.replace(swap, volume / "..data")
    if not (volume / "keys").is_symlink():
        (volume / "keys").symlink_to("..data/keys")


def test_a_secret_volume_s_update_seals_the_very_next_token_under_its_first_key(
    tmp_path: Path, k1: str, k2: str
) -> None:
    volume, ticker = tmp_path / "secret", Ticker()
    volume.mkdir()
    project_secret(volume, "2026_01_01_00_00_00.1", k1)
    ring = key_ring_from_file(volume / "keys", monotonic=ticker)
    first = sealed_with(ring)
    project_secret(volume, "2026_01_01_00_01_00.2", k2, k1)

    assert (first, sealed_with(ring)) == ("k1", "k2")


def test_an_empty_key_ring_file_keeps_the_ring_is_logged_once_and_its_repair_seals_at_once(
    tmp_path: Path, k1: str, k2: str, caplog: pytest.LogCaptureFixture
) -> None:
    path, ticker = tmp_path / "keys", Ticker()
    write_ring(path, k1)
    ring = key_ring_from_file(path, monotonic=ticker)
    path.write_text("", encoding="utf-8")  # an edit in place, half done

    with caplog.at_level(logging.DEBUG):
        while_empty = [sealed_with(ring) for _ in range(3)]
    write_ring(path, k2, k1)
    repaired = sealed_with(ring)

    assert (while_empty, repaired) == (["k1", "k1", "k1"], "k2")
    logged = [record.getMessage() for record in caplog.records]
    assert sum("keeping the key ring as it was" in line for line in logged) == 1
    assert any("the key ring is empty" in line for line in logged)


def test_a_pat_minted_after_a_rotation_is_sealed_under_the_new_key_and_survives_the_old_s_removal(
    make_store: Callable[..., CredentialStore],
    database: Database,
    tmp_path: Path,
    k1: str,
    k2: str,
) -> None:
    # On-call puts k2 first in the Secret and runs keys rotate; the operator, not restarted,
    # then mints for a new sandbox; later k1 is dropped and the operator restarted.
    path, ticker = tmp_path / "keys", Ticker()
    write_ring(path, k1)
    operator = make_store(key_ring_from_file(path, monotonic=ticker))
    user = database.new_user()
    operator.ensure(SANDBOX, user_id=user, tenant_id="public")
    write_ring(path, k2, k1)
    make_store(KeyRing.parse(f"{k2},{k1}")).rotate()

    minted = operator.ensure(NEWER_SANDBOX, user_id=user, tenant_id="public")  # no wait
    write_ring(path, k2)
    restarted = make_store(key_ring_from_file(path))
    again = restarted.ensure(NEWER_SANDBOX, user_id=user, tenant_id="public")

    assert operator.key_ids_in_use() == {"k2": 2}
    assert (again.minted, again.pat_id) == (False, minted.pat_id)


def test_a_bad_key_ring_file_keeps_encrypting_with_the_current_key_and_logs_no_key_material(
    tmp_path: Path, k1: str, caplog: pytest.LogCaptureFixture
) -> None:
    path, ticker = tmp_path / "keys", Ticker()
    write_ring(path, k1)
    ring = key_ring_from_file(path, monotonic=ticker)
    key = k1.split(":")[1]
    write_ring(path, f"{key}:k2")  # written the wrong way round
    ticker.now += RELOAD_INTERVAL

    with caplog.at_level(logging.DEBUG):
        sealed = sealed_with(ring)
        path.unlink()
        ticker.now += RELOAD_INTERVAL
        sealed_when_gone = sealed_with(ring)

    assert (sealed, sealed_when_gone) == ("k1", "k1")
    logged = "\n".join(record.getMessage() for record in caplog.records)
    assert logged.count("keeping the key ring as it was") == 2
    assert "key ring entry 1" in logged
    assert "cannot read the key ring file" in logged
    assert key not in logged
    assert key.rstrip("=")[:16] not in logged


def test_a_ring_given_as_text_has_nothing_to_re_read(k1: str) -> None:
    assert KeyRing.parse(k1).reload() is False


def test_a_key_still_missing_after_the_re_read_revokes_nothing_and_names_the_ways_out(
    make_store: Callable[..., CredentialStore],
    database: Database,
    tmp_path: Path,
    k1: str,
    k2: str,
) -> None:
    user = database.new_user()
    first = make_store(KeyRing.parse(k1)).ensure(SANDBOX, user_id=user, tenant_id="public")
    path, ticker = tmp_path / "keys", Ticker()
    write_ring(path, k2)
    operator = make_store(key_ring_from_file(path, monotonic=ticker))
    envelope = stored_envelope(database)
    ticker.now += RELOAD_INTERVAL

    for _ in range(2):  # every retry says the same, and still revokes nothing
        with pytest.raises(KeyNotInRingError) as caught:
            operator.ensure(SANDBOX, user_id=user, tenant_id="public")
        assert failure_reason(caught.value) == "KeyNotInRing"
        assert caught.value.key_id == "k1"
        assert caught.value.ring_key_ids == ("k2",)
        assert "(it has 'k2')" in str(caught.value)
        assert "put key 'k1' back in the key ring" in str(caught.value)
        assert "craft-operator credentials revoke team-a/alice" in str(caught.value)
        assert not pat_revoked(database, first.pat_id)
        assert stored_envelope(database) == envelope


def test_after_credentials_revoke_a_new_pat_is_minted_under_the_ring_s_key(
    make_store: Callable[..., CredentialStore], database: Database, k1: str, k2: str
) -> None:
    user = database.new_user()
    first = make_store(KeyRing.parse(k1)).ensure(SANDBOX, user_id=user, tenant_id="public")
    operator = make_store(KeyRing.parse(k2))
    with pytest.raises(KeyNotInRingError):
        operator.ensure(SANDBOX, user_id=user, tenant_id="public")

    assert operator.revoke_named("team-a", "alice") is not None
    issued = operator.ensure(SANDBOX, user_id=user, tenant_id="public")

    assert issued.minted
    assert issued.pat_id != first.pat_id
    assert operator.key_ids_in_use() == {"k2": 1}


def test_a_token_sealed_by_another_key_of_the_same_id_is_still_revoked_and_replaced(
    make_store: Callable[..., CredentialStore],
    database: Database,
    tmp_path: Path,
    k1: str,
) -> None:
    user = database.new_user()
    first = make_store(KeyRing.parse(k1)).ensure(SANDBOX, user_id=user, tenant_id="public")
    path = tmp_path / "keys"
    write_ring(path, generate_key_entry("k1").get_secret_value())  # regenerated, same id
    operator = make_store(key_ring_from_file(path))

    issued = operator.ensure(SANDBOX, user_id=user, tenant_id="public")

    assert issued.minted
    assert (issued.reason or "").startswith(UNDECRYPTABLE)
    assert "failed authentication under key 'k1'" in (issued.reason or "")
    assert pat_revoked(database, first.pat_id)
    assert database.live_pats() == 1


def test_a_tampered_envelope_under_a_key_the_file_ring_has_is_still_replaced(
    make_store: Callable[..., CredentialStore], database: Database, tmp_path: Path, k1: str
) -> None:
    path = tmp_path / "keys"
    write_ring(path, k1)
    operator = make_store(key_ring_from_file(path))
    user = database.new_user()
    first = operator.ensure(SANDBOX, user_id=user, tenant_id="public")
    envelope = bytearray(stored_envelope(database))
    envelope[-3] ^= 0x01
    with database.engine.begin() as connection:
        connection.execute(update(SandboxCredential).values(encrypted_token=bytes(envelope)))

    issued = operator.ensure(SANDBOX, user_id=user, tenant_id="public")

    assert issued.minted
    assert issued.superseded_pat_id == first.pat_id
    assert pat_revoked(database, first.pat_id)


def test_a_missing_key_is_its_own_kind_of_key_ring_error() -> None:
    missing = KeyNotInRingError("gone", key_id="k0", ring_key_ids=("k1",))

    assert isinstance(missing, KeyRingError)
    assert not isinstance(missing, DecryptionError)
    assert failure_reason(missing) == "KeyNotInRing"
    assert failure_reason(DecryptionError("altered")) == "KeyRingError"


def test_a_rotation_records_the_key_each_token_was_sealed_with_when_the_file_changes_meanwhile(
    make_store: Callable[..., CredentialStore], database: Database, tmp_path: Path, k1: str, k2: str
) -> None:
    path, ticker = tmp_path / "keys", Ticker()
    write_ring(path, k1)
    user = database.new_user()
    minting = make_store(key_ring_from_file(path, monotonic=ticker))
    for index in range(4):
        identity = SandboxIdentity("team-a", f"box-{index}", f"uid-{index}")
        minting.ensure(identity, user_id=user, tenant_id="public")
    k3 = generate_key_entry("k3").get_secret_value()
    write_ring(path, k2, k1)
    ticker.now += RELOAD_INTERVAL
    ring = key_ring_from_file(path, monotonic=ticker)

    def a_newer_key_arrives(_: object) -> None:  # the kubelet updates the Secret mid-run
        write_ring(path, k3, k2, k1)
        ticker.now += RELOAD_INTERVAL

    make_store(ring).rotate(batch_size=2, progress=a_newer_key_arrives)

    table = SandboxCredential.__table__
    with database.engine.connect() as connection:
        rows = connection.execute(select(table.c.key_id, table.c.encrypted_token)).all()
    recorded = {(key_id, parse_header(token, subject="test")[0]) for key_id, token in rows}
    assert all(key_id == sealed for key_id, sealed in recorded), recorded
