"""The encryption key ring and the AES-256-GCM envelope of stored tokens.

Envelope layout (all of it is stored in one binary column)::

    version (1 byte, 0x01) | key id length (1 byte) | key id (ASCII) | nonce (12 bytes)
    | ciphertext and 16-byte GCM tag

The associated data is the envelope header plus the sandbox's uid, so a ciphertext copied
into another sandbox's row, or relabelled with another key id, fails authentication.
Key ring text: ``id:base64key`` entries separated by commas or newlines; the first entry
encrypts, every entry decrypts. A ring read from a file (a mounted Secret, which Kubernetes
updates in place) can be re-read while the operator runs: see :meth:`KeyRing.reload`, and
:meth:`FileKeyRing.encrypt`, which re-reads a file that changed since its last read (or
was last read over an interval ago).
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import logging
import os
import re
import secrets
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from pydantic import SecretStr

from craft_operator.credentials.errors import DecryptionError, KeyNotInRingError, KeyRingError

log = logging.getLogger(__name__)

ENVELOPE_VERSION = 1
KEY_BYTES = 32
NONCE_BYTES = 12
TAG_BYTES = 16
#: A key id, matched against the whole text (``fullmatch``: ``$`` would let a trailing
#: newline through, and an entry printed with one parses in no ring).
KEY_ID_PATTERN = r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}"
_KEY_ID_RE = re.compile(KEY_ID_PATTERN)
_AAD_LABEL = b"craft-operator/pat/v1\x00"
DEV_KEY_RING_FILE = "dev-encryption-keys"
#: A key ring file that looks unchanged (same inode, size and mtime) is re-read at most this
#: often (seconds), however many tokens need it; a changed one is re-read at its next use.
RELOAD_INTERVAL = 10.0

#: What tells a key ring file's versions apart without reading it: inode, size, mtime (ns).
FileStamp = tuple[int, int, int]


_KEY_ID_RULE = "1-64 letters, digits, '.', '_' or '-', starting with a letter or digit"


def _is_key_id(text: str) -> bool:
    """Whether all of ``text`` is a key id (no trailing newline or anything else)."""
    return _KEY_ID_RE.fullmatch(text) is not None


def check_key_id(key_id: str) -> str:
    """Return ``key_id`` if it is a valid key id, else raise :class:`KeyRingError`.

    The message never repeats the text: an entry written the wrong way round puts the key
    itself where the id belongs.
    """
    if not _is_key_id(key_id):
        raise KeyRingError(f"the key id is invalid: use {_KEY_ID_RULE}")
    return key_id


def _decode_key(where: str, encoded: str) -> bytes:
    """The 32 key bytes of ``encoded``; errors name the entry by ``where`` only."""
    text = encoded.strip().replace("-", "+").replace("_", "/")
    text += "=" * (-len(text) % 4)
    try:
        key = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise KeyRingError(f"{where}: the key is not valid base64") from None
    if len(key) != KEY_BYTES:
        raise KeyRingError(
            f"{where}: the key is {len(key)} bytes long; AES-256 needs {KEY_BYTES} bytes "
            "(generate one with: craft-operator keys generate)"
        )
    return key


def _parse_entry(position: int, entry: str) -> tuple[str, bytes]:
    """One ``id:base64key`` entry's id and key.

    Errors name the entry by its position only: until the entry has parsed completely,
    the text before the colon may be key material (a URL-safe key looks like a key id,
    so an entry written ``key:id`` would otherwise put the key into the message).
    """
    where = f"key ring entry {position}"
    key_id, separator, encoded = entry.partition(":")
    key_id = key_id.strip()
    if not separator:
        raise KeyRingError(f"{where} is not of the form id:base64key")
    if not _is_key_id(key_id):
        raise KeyRingError(
            f"{where}: the key id is invalid (use {_KEY_ID_RULE}); entries are written id:base64key"
        )
    return key_id, _decode_key(where, encoded)


def parse_entries(text: str | SecretStr) -> list[tuple[str, bytes]]:
    """The ``(id, key)`` entries of key ring text, in order; raise :class:`KeyRingError`
    naming the first bad entry by position (and a duplicate id, once its entry parsed)."""
    raw = text.get_secret_value() if isinstance(text, SecretStr) else text
    keys: list[tuple[str, bytes]] = []
    seen: set[str] = set()
    for position, entry in enumerate(re.split(r"[,\n]", raw), start=1):
        entry = entry.strip()
        if not entry:
            continue
        key_id, key = _parse_entry(position, entry)
        if key_id in seen:
            raise KeyRingError(
                f"key ring entry {position} (id {key_id!r}): the key id appears twice "
                "in the key ring"
            )
        seen.add(key_id)
        keys.append((key_id, key))
    return keys


@dataclass(frozen=True)
class _Keys:
    """One version of a ring's keys; replaced whole, so readers never see half a reload."""

    ciphers: Mapping[str, AESGCM]
    current: str


def _build_keys(keys: Iterable[tuple[str, bytes]]) -> _Keys:
    """The ciphers of ``keys``, the first one encrypting; raise on a bad or empty ring."""
    ciphers: dict[str, AESGCM] = {}
    for key_id, key in keys:
        check_key_id(key_id)
        if key_id in ciphers:
            raise KeyRingError(f"key id {key_id!r} appears twice in the key ring")
        if len(key) != KEY_BYTES:
            raise KeyRingError(f"key {key_id!r} must be {KEY_BYTES} bytes long")
        ciphers[key_id] = AESGCM(key)
    if not ciphers:
        raise KeyRingError("the key ring is empty: give at least one id:base64key entry")
    return _Keys(ciphers, next(iter(ciphers)))


class KeyRing:
    """Named AES-256 keys: the first encrypts, all decrypt. Its repr shows key ids only."""

    def __init__(self, keys: Iterable[tuple[str, bytes]]) -> None:
        self._keys = _build_keys(keys)

    @classmethod
    def parse(cls, text: str | SecretStr) -> KeyRing:
        """Build a key ring from ``id:base64key`` entries (commas or newlines between)."""
        return KeyRing(parse_entries(text))

    def reload(self) -> bool:
        """Read the ring's source again; True if it was read. A ring given as text has
        nothing to re-read (see :class:`FileKeyRing`)."""
        return False

    @property
    def current_key_id(self) -> str:
        """The id of the key that encrypts."""
        return self._keys.current

    @property
    def key_ids(self) -> tuple[str, ...]:
        """Every key id in the ring, the encrypting one first."""
        return tuple(self._keys.ciphers)

    def __repr__(self) -> str:
        return f"KeyRing(key_ids={list(self._keys.ciphers)!r})"

    __str__ = __repr__

    def encrypt(self, plaintext: bytes, *, context: bytes) -> bytes:
        """Encrypt under the current key with a fresh random nonce, bound to ``context``."""
        keys = self._keys
        header = _header(keys.current)
        nonce = os.urandom(NONCE_BYTES)
        sealed = keys.ciphers[keys.current].encrypt(nonce, plaintext, _aad(header, context))
        return header + nonce + sealed

    def decrypt(self, envelope: bytes, *, context: bytes, subject: str) -> bytes:
        """Open an envelope made by :meth:`encrypt` for the same ``context``.

        ``subject`` names what the envelope belongs to (e.g. ``sandbox ns/name``) in errors.
        Raises :class:`KeyNotInRingError` when the envelope names a key id the ring lacks
        (the token may open with another ring), and :class:`DecryptionError` when it is
        malformed or fails authentication under the key of its id (it is lost).
        """
        key_id, header_length = parse_header(envelope, subject=subject)
        keys = self._keys
        cipher = keys.ciphers.get(key_id)
        if cipher is None:
            held = ", ".join(repr(each) for each in keys.ciphers)
            raise KeyNotInRingError(
                f"the stored token of {subject} is encrypted with key {key_id!r}, which is not "
                f"in the key ring (it has {held})",
                key_id=key_id,
                ring_key_ids=tuple(keys.ciphers),
            )
        body = envelope[header_length:]
        if len(body) < NONCE_BYTES + TAG_BYTES:
            raise DecryptionError(
                f"the stored token of {subject} (key {key_id!r}) is truncated: "
                f"{len(envelope)} bytes"
            )
        nonce, sealed = body[:NONCE_BYTES], body[NONCE_BYTES:]
        try:
            return cipher.decrypt(nonce, sealed, _aad(envelope[:header_length], context))
        except InvalidTag:
            raise DecryptionError(
                f"the stored token of {subject} failed authentication under key {key_id!r}: "
                "it was altered, truncated or copied from another sandbox"
            ) from None


def _header(key_id: str) -> bytes:
    encoded = key_id.encode("ascii")
    return bytes([ENVELOPE_VERSION, len(encoded)]) + encoded


def _aad(header: bytes, context: bytes) -> bytes:
    return _AAD_LABEL + header + b"\x00" + context


def parse_header(envelope: bytes, *, subject: str) -> tuple[str, int]:
    """The key id an envelope names and the header's length; a malformed header raises."""
    if len(envelope) < 2:
        raise DecryptionError(f"the stored token of {subject} is truncated: no envelope header")
    if envelope[0] != ENVELOPE_VERSION:
        raise DecryptionError(
            f"the stored token of {subject} has envelope version {envelope[0]}; "
            f"this operator reads version {ENVELOPE_VERSION}"
        )
    length = envelope[1]
    end = 2 + length
    if length == 0 or len(envelope) < end:
        raise DecryptionError(f"the stored token of {subject} is truncated inside its key id")
    try:
        key_id = envelope[2:end].decode("ascii")
    except UnicodeDecodeError:
        raise DecryptionError(f"the stored token of {subject} has a corrupt key id") from None
    if not _is_key_id(key_id):
        raise DecryptionError(f"the stored token of {subject} has a corrupt key id")
    return key_id, end


def seal_token(ring: KeyRing, token: SecretStr, *, sandbox_uid: str) -> bytes:
    """Encrypt a PAT for the sandbox with this uid."""
    return ring.encrypt(token.get_secret_value().encode("utf-8"), context=sandbox_uid.encode())


def open_token(ring: KeyRing, envelope: bytes, *, sandbox_uid: str, subject: str) -> SecretStr:
    """Decrypt a PAT stored for the sandbox with this uid."""
    plaintext = ring.decrypt(envelope, context=sandbox_uid.encode(), subject=subject)
    return SecretStr(plaintext.decode("utf-8"))


def new_key_id(now: datetime | None = None) -> str:
    """A key id from the current UTC time, e.g. ``k20260101T120000``."""
    return (now or datetime.now(UTC)).strftime("k%Y%m%dT%H%M%S")


def generate_key_entry(key_id: str | None = None) -> SecretStr:
    """A new ``id:base64key`` entry with 32 random bytes."""
    key_id = check_key_id(key_id or new_key_id())
    encoded = base64.b64encode(secrets.token_bytes(KEY_BYTES)).decode("ascii")
    return SecretStr(f"{key_id}:{encoded}")


def development_key_ring(state_dir: Path) -> KeyRing:
    """Read, or create on first use, the development key ring file in ``state_dir``.

    The file is created with mode 0600 and never overwritten. It keeps the README's
    quickstart working without settings; production mounts CRAFT_ENCRYPTION_KEYS instead.
    """
    path = state_dir / DEV_KEY_RING_FILE
    log.warning(
        "CRAFT_ENCRYPTION_KEYS is not set: using the development key ring %s; "
        "for development only, set CRAFT_ENCRYPTION_KEYS from a Secret in production",
        path,
    )
    state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    if not path.exists():
        # Written aside and linked into place, so a concurrent reader never sees half a file
        # and two processes starting at once agree on one key.
        temporary = state_dir / f".{DEV_KEY_RING_FILE}.{os.getpid()}.{secrets.token_hex(4)}"
        descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            with os.fdopen(descriptor, "w") as handle:
                handle.write(generate_key_entry(new_key_id()).get_secret_value() + "\n")
            with contextlib.suppress(FileExistsError):
                os.link(temporary, path)
        finally:
            temporary.unlink(missing_ok=True)
    return key_ring_from_file(path)


def _read_key_file(path: Path) -> _Keys:
    """The keys of a key ring file; errors name the file and the entry, never a key."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise KeyRingError(f"cannot read the key ring file {path}: {exc.strerror}") from None
    except UnicodeDecodeError:
        # A raw key put in the Secret as is (--from-file=keys=key.bin): never quote it.
        raise KeyRingError(
            f"key ring file {path} is not text: it holds entries id:base64key, one per "
            "line or comma-separated (craft-operator keys generate makes one)"
        ) from None
    try:
        return _build_keys(parse_entries(text))
    except KeyRingError as exc:
        raise KeyRingError(f"key ring file {path}: {exc}") from None


def _stamp(path: Path) -> FileStamp | None:
    """The file's inode, size and mtime (following symlinks, as a Secret volume's file is
    one), or None when it cannot be stat'ed."""
    try:
        status = os.stat(path)
    except OSError:
        return None
    return (status.st_ino, status.st_size, status.st_mtime_ns)


class FileKeyRing(KeyRing):
    """A key ring read from a file, which :meth:`reload` reads again (before sealing, and
    when a token names a key the ring lacks) once it changed.

    A Secret mounted as a volume is updated in place when the Secret changes (the kubelet
    swaps a symlink to a new file), and the operator is not restarted: a token sealed under
    a key added there since (by ``craft-operator keys rotate`` run with the new ring) opens
    once the file is re-read, and a key put first there seals every token encrypted after
    the file changed.
    """

    def __init__(
        self,
        path: Path,
        *,
        interval: float = RELOAD_INTERVAL,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        # Not KeyRing.__init__: the keys come from the file, read as on every reload.
        # Stamped before reading: a change while it is read shows at the next check.
        self._read_stamp = _stamp(path)
        self._keys = _read_key_file(path)
        self.path = path
        self._interval = interval
        self._monotonic = monotonic
        self._read_at = monotonic()
        self._reading = threading.Lock()

    def _due(self, now: float, stamp: FileStamp | None) -> bool:
        """Whether to read the file: it changed since the last read, or that read is
        ``interval`` seconds old (a change that kept inode, size and mtime, which a
        coarse clock allows for an edit in place)."""
        return stamp != self._read_stamp or now - self._read_at >= self._interval

    def reload(self) -> bool:
        """Read the file again if it changed since the last read (its inode, size or
        mtime), else at most once per ``interval`` seconds; True if it was read and the
        ring is now what it says. A file that cannot be read or parsed leaves the ring as
        it was, and is logged (by entry position, never with key material) once per change
        or interval."""
        with self._reading:
            now, stamp = self._monotonic(), _stamp(self.path)
            if not self._due(now, stamp):
                return False
            self._read_at, self._read_stamp = now, stamp
            try:
                fresh = _read_key_file(self.path)
            except KeyRingError as exc:
                log.warning("keeping the key ring as it was (key ids %s): %s", self.key_ids, exc)
                return False
            if tuple(fresh.ciphers) != self.key_ids:
                log.info(
                    "re-read the key ring file %s: key ids %s, encrypting with %r",
                    self.path,
                    list(fresh.ciphers),
                    fresh.current,
                )
            self._keys = fresh
            return True

    def encrypt(self, plaintext: bytes, *, context: bytes) -> bytes:
        """Encrypt under the current key, after re-reading the file if it changed since
        its last read (see :meth:`reload`): a key put first in the Secret seals every token
        minted from then on. Sealed under the key it replaces, they would miss a
        ``keys rotate`` already run, and be stranded once that key is dropped. An unchanged
        file costs a lock, a clock read and a stat."""
        self.reload()
        return super().encrypt(plaintext, context=context)

    def decrypt(self, envelope: bytes, *, context: bytes, subject: str) -> bytes:
        """:meth:`KeyRing.decrypt`, once more after a re-read of the file (see
        :meth:`reload`) when the envelope's key is not in the ring: ``keys rotate`` run
        elsewhere with a newer ring, or another thread re-read it a moment ago."""
        try:
            return super().decrypt(envelope, context=context, subject=subject)
        except KeyNotInRingError:
            self.reload()
        return super().decrypt(envelope, context=context, subject=subject)


def key_ring_from_file(path: Path, *, monotonic: Callable[[], float] = time.monotonic) -> KeyRing:
    """Read a key ring file (the same text as CRAFT_ENCRYPTION_KEYS); the ring re-reads it
    on :meth:`KeyRing.reload` and before encrypting once it changed (an unchanged file at
    most once per :data:`RELOAD_INTERVAL` seconds)."""
    return FileKeyRing(path, monotonic=monotonic)
