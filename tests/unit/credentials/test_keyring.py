"""The key ring and the AES-256-GCM envelope: parsing, sealing, and loud failures."""

from __future__ import annotations

import base64
import logging
import os
import stat
from pathlib import Path

import pytest
from pydantic import SecretStr

from craft_operator.credentials import DecryptionError, KeyRing, KeyRingError, generate_key_entry
from craft_operator.credentials.keyring import (
    NONCE_BYTES,
    check_key_id,
    development_key_ring,
    key_ring_from_file,
    open_token,
    seal_token,
)

KEY_A = base64.b64encode(b"A" * 32).decode()
KEY_B = base64.b64encode(b"B" * 32).decode()
TOKEN = SecretStr("onyx_pat_" + "t" * 256)
SUBJECT = "sandbox team-a/alice"


def test_the_first_entry_encrypts_and_every_entry_decrypts() -> None:
    old = KeyRing.parse(f"old:{KEY_A}")
    sealed_by_old = seal_token(old, TOKEN, sandbox_uid="u1")

    ring = KeyRing.parse(f"new:{KEY_B}, old:{KEY_A}")

    assert ring.current_key_id == "new"
    assert ring.key_ids == ("new", "old")
    assert open_token(ring, sealed_by_old, sandbox_uid="u1", subject=SUBJECT) == TOKEN


def test_entries_may_be_separated_by_newlines_as_in_a_mounted_file() -> None:
    ring = KeyRing.parse(f"\nnew:{KEY_B}\nold:{KEY_A}\n")

    assert ring.key_ids == ("new", "old")


def test_urlsafe_and_unpadded_base64_keys_are_accepted() -> None:
    raw = bytes(range(32))
    urlsafe = base64.urlsafe_b64encode(raw).decode().rstrip("=")

    KeyRing.parse(f"k:{urlsafe}")


#: The key material of the malformed forms below, in every form it could be echoed in.
CANARY = base64.b64encode(b"canary-key-material-32-bytes-lo").decode()
LONG_CANARY = base64.b64encode(b"canary-key-material-32-bytes-lo" + b"more").decode()
#: A whole key as ``secrets.token_urlsafe(32)`` writes it: 43 characters that are also a
#: well-formed key id.
URLSAFE_CANARY = base64.urlsafe_b64encode(b"canary-urlsafe-key-material-32by").decode().rstrip("=")
CANARY_FORMS = {
    form
    for key in (CANARY, URLSAFE_CANARY)
    for form in (
        key,
        key.rstrip("="),
        key.replace("+", "-").replace("/", "_"),
        key[:16],
        key[-16:],
    )
}


@pytest.mark.parametrize(
    ("text", "complaint"),
    [
        ("", "the key ring is empty"),
        (" , \n ,", "the key ring is empty"),
        (CANARY, r"^key ring entry 1 is not of the form id:base64key$"),
        (f"k1:{KEY_A},{CANARY}", r"^key ring entry 2 is not of the form id:base64key$"),
        (f"{CANARY}:k1", r"^key ring entry 1: the key id is invalid .*written id:base64key$"),
        (f"k1:{KEY_A}\n{CANARY}:k2", r"^key ring entry 2: the key id is invalid"),
        (f":{CANARY}", r"^key ring entry 1: the key id is invalid"),
        (f"bad id:{CANARY}", r"^key ring entry 1: the key id is invalid"),
        (f"{'k' * 65}:{CANARY}", r"^key ring entry 1: the key id is invalid"),
        (f"{URLSAFE_CANARY}:k1", r"^key ring entry 1: the key is 1 bytes long"),
        (f"k1:{KEY_A}\n{URLSAFE_CANARY}:k2", r"^key ring entry 2: the key is 1 bytes long"),
        (f"k1:{CANARY}!", r"^key ring entry 1: the key is not valid base64$"),
        (f"k1:{CANARY}:extra", r"^key ring entry 1: the key is not valid base64$"),
        (f"k1:{CANARY[:20]}", r"^key ring entry 1: the key is 15 bytes long"),
        ("k1:", r"^key ring entry 1: the key is 0 bytes long"),
        (f"k1:{LONG_CANARY}", r"^key ring entry 1: the key is 35 bytes long"),
        (f"k1:{KEY_A},k1:{CANARY}", r"^key ring entry 2: the key is 31 bytes long"),
        (f"k1:{KEY_A},k1:{KEY_B}", r"^key ring entry 2 \(id 'k1'\): the key id appears twice"),
    ],
    ids=[
        "empty",
        "only separators",
        "a bare key",
        "a bare key second",
        "key:id written the wrong way round",
        "key:id second",
        "no id",
        "id with a space",
        "id too long",
        "a url-safe key written the wrong way round",
        "a url-safe key written the wrong way round second",
        "not base64",
        "a second colon",
        "key too short",
        "no key",
        "key too long",
        "a duplicate id with a bad key",
        "duplicate id",
    ],
)
def test_a_malformed_key_ring_is_named_by_position_and_never_echoes_key_material(
    text: str, complaint: str
) -> None:
    with pytest.raises(KeyRingError, match=complaint) as caught:
        KeyRing.parse(text)

    message = str(caught.value) + repr(caught.value)
    assert not [form for form in CANARY_FORMS if form in message]
    assert KEY_A not in message
    assert KEY_B not in message


@pytest.mark.parametrize(
    "text",
    [f"{URLSAFE_CANARY}:k1", f"k1:{KEY_A}, {URLSAFE_CANARY}:k2", f"k1:{URLSAFE_CANARY[:-1]}"],
    ids=["wrong way round", "wrong way round second", "key one character short"],
)
def test_a_key_ring_file_with_a_bad_entry_never_echoes_key_material(
    tmp_path: Path, text: str
) -> None:
    path = tmp_path / "keys"
    path.write_text(text + "\n", encoding="utf-8")

    with pytest.raises(KeyRingError, match=f"^key ring file {path}: key ring entry") as caught:
        key_ring_from_file(path)

    message = str(caught.value) + repr(caught.value)
    assert not [form for form in CANARY_FORMS if form in message]


def test_each_encryption_uses_a_fresh_nonce() -> None:
    ring = KeyRing.parse(f"k:{KEY_A}")

    first = seal_token(ring, TOKEN, sandbox_uid="u1")
    second = seal_token(ring, TOKEN, sandbox_uid="u1")

    header = 2 + len("k")
    assert first[header : header + NONCE_BYTES] != second[header : header + NONCE_BYTES]
    assert first != second


def test_the_envelope_names_its_key_and_hides_the_token() -> None:
    envelope = seal_token(KeyRing.parse(f"k7:{KEY_A}"), TOKEN, sandbox_uid="u1")

    assert envelope[0] == 1
    assert envelope[2 : 2 + envelope[1]] == b"k7"
    assert TOKEN.get_secret_value().encode() not in envelope


def test_a_flipped_ciphertext_byte_fails_authentication() -> None:
    ring = KeyRing.parse(f"k:{KEY_A}")
    envelope = bytearray(seal_token(ring, TOKEN, sandbox_uid="u1"))
    envelope[-1] ^= 0x80

    with pytest.raises(DecryptionError, match="failed authentication under key 'k'") as caught:
        open_token(ring, bytes(envelope), sandbox_uid="u1", subject=SUBJECT)

    assert "team-a/alice" in str(caught.value)


def test_a_ciphertext_bound_to_another_sandbox_fails() -> None:
    ring = KeyRing.parse(f"k:{KEY_A}")
    envelope = seal_token(ring, TOKEN, sandbox_uid="uid-of-bob")

    with pytest.raises(DecryptionError, match="copied from another sandbox"):
        open_token(ring, envelope, sandbox_uid="uid-of-alice", subject=SUBJECT)


def test_an_unknown_key_id_is_named() -> None:
    envelope = seal_token(KeyRing.parse(f"gone:{KEY_A}"), TOKEN, sandbox_uid="u1")

    with pytest.raises(KeyRingError, match="key 'gone', which is not in the key ring"):
        open_token(KeyRing.parse(f"k:{KEY_B}"), envelope, sandbox_uid="u1", subject=SUBJECT)


@pytest.mark.parametrize("key_id", ["k1\n", "k1\r\n", "k1 ", "\nk1", ""])
def test_a_key_id_is_refused_unless_all_of_it_is_a_key_id(key_id: str) -> None:
    with pytest.raises(KeyRingError, match="the key id is invalid"):
        check_key_id(key_id)
    with pytest.raises(KeyRingError, match="the key id is invalid"):
        KeyRing([(key_id, b"A" * 32)])


def test_an_envelope_naming_a_key_id_with_a_trailing_newline_is_corrupt() -> None:
    ring = KeyRing.parse(f"k1:{KEY_A}")
    sealed = seal_token(ring, TOKEN, sandbox_uid="u1")
    envelope = bytes([sealed[0], 3]) + b"k1\n" + sealed[4:]

    with pytest.raises(DecryptionError, match="has a corrupt key id"):
        open_token(ring, envelope, sandbox_uid="u1", subject=SUBJECT)


def test_relabelling_the_key_id_fails_authentication() -> None:
    ring = KeyRing.parse(f"a:{KEY_A},b:{KEY_A}")
    envelope = bytearray(seal_token(ring, TOKEN, sandbox_uid="u1"))
    envelope[2:3] = b"b"

    with pytest.raises(DecryptionError):
        open_token(ring, bytes(envelope), sandbox_uid="u1", subject=SUBJECT)


@pytest.mark.parametrize("length", [0, 1, 3, 10, 20])
def test_a_truncated_envelope_fails_loudly(length: int) -> None:
    ring = KeyRing.parse(f"k:{KEY_A}")
    envelope = seal_token(ring, TOKEN, sandbox_uid="u1")[:length]

    with pytest.raises(DecryptionError, match="truncated"):
        open_token(ring, envelope, sandbox_uid="u1", subject=SUBJECT)


def test_an_unknown_envelope_version_is_refused() -> None:
    ring = KeyRing.parse(f"k:{KEY_A}")
    envelope = b"\x07" + seal_token(ring, TOKEN, sandbox_uid="u1")[1:]

    with pytest.raises(DecryptionError, match="envelope version 7"):
        open_token(ring, envelope, sandbox_uid="u1", subject=SUBJECT)


def test_the_key_ring_repr_shows_ids_only() -> None:
    ring = KeyRing.parse(f"k:{KEY_A}")

    assert repr(ring) == "KeyRing(key_ids=['k'])"
    assert KEY_A not in str(ring)


def test_generated_entries_parse_and_differ() -> None:
    first, second = generate_key_entry("one"), generate_key_entry("two")

    assert KeyRing.parse(first).key_ids == ("one",)
    assert first.get_secret_value().split(":")[1] != second.get_secret_value().split(":")[1]


def test_the_development_key_ring_is_created_once_with_mode_0600(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING):
        first = development_key_ring(tmp_path / "state")
    second = development_key_ring(tmp_path / "state")

    path = tmp_path / "state" / "dev-encryption-keys"
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert first.key_ids == second.key_ids
    assert any("development only" in record.getMessage() for record in caplog.records)
    assert [p.name for p in (tmp_path / "state").iterdir()] == ["dev-encryption-keys"]


def test_a_key_ring_file_with_a_bad_entry_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "keys"
    path.write_text("k1:xx\n")

    with pytest.raises(KeyRingError, match=str(path)):
        key_ring_from_file(path)


def test_a_key_ring_file_turned_to_raw_bytes_keeps_the_ring_it_had(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The Secret volume updated with a raw key: minting must go on with the ring read
    before, and the log say why, never quoting the bytes."""
    path = tmp_path / "keys"
    path.write_text(generate_key_entry("k1").get_secret_value() + "\n")
    now = [0.0]
    ring = key_ring_from_file(path, monotonic=lambda: now[0])
    path.write_bytes(b"\xc3\x28" + bytes(range(30)))
    now[0] += 3600

    with caplog.at_level(logging.WARNING):
        sealed = ring.encrypt(b"token", context=b"uid")

    assert ring.key_ids == ("k1",)
    assert ring.decrypt(sealed, context=b"uid", subject="x") == b"token"
    assert "is not text" in caplog.text
