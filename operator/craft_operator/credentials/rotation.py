"""Re-encrypting this cluster's stored tokens under the key ring's current key, and
finding out which keys the stored tokens are sealed with.

Rows without a cluster id (from before cluster ids, see :mod:`.claiming`) are never
rotated: they may be another cluster's, sealed with another ring. They are counted by key
all the same, since a key that seals one of them cannot be dropped from the ring until the
row is adopted (``craft-operator credentials adopt``) and rotated.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pydantic import SecretStr
from sqlalchemy import ColumnElement, func, or_, select, update
from sqlalchemy.engine import Connection

from craft_operator.credentials.backend import CRED, StoreBackend
from craft_operator.credentials.db import translated_errors
from craft_operator.credentials.errors import CredentialsError, DecryptionError
from craft_operator.credentials.keyring import open_token, parse_header, seal_token
from craft_operator.credentials.model import RotationResult


@dataclass(frozen=True)
class RotationReport(RotationResult):
    """What :meth:`CredentialStore.rotate` did, and how many rows it had to leave because
    another writer held them (an operator minting): those need another run."""

    busy: int = 0


@dataclass(frozen=True)
class KeyUsage:
    """Which keys seal the stored tokens, as the envelopes' key ids say."""

    #: This cluster's stored tokens by key id.
    by_key: dict[str, int]
    #: Tokens of rows without a cluster id by key id: never rotated by this operator.
    unclaimed_by_key: dict[str, int] = field(default_factory=dict)
    #: ``namespace/name`` of the rows (this cluster's or without a cluster id) whose
    #: envelope header cannot be read.
    malformed: tuple[str, ...] = ()
    #: How many of this cluster's tokens were opened as a sample (see :func:`key_usage`).
    sampled: int = 0
    #: ``(namespace/name, key id)`` of sampled tokens that failed to open under the ring's
    #: key of their id: that key is not the one that sealed them.
    undecryptable: tuple[tuple[str, str], ...] = ()


@dataclass
class _Batch:
    """What one batch of a rotation did; ``last_id`` is None when no row was left."""

    changed: int = 0
    failures: list[str] = field(default_factory=list)
    busy: int = 0
    last_id: int | None = None


def rotate(
    backend: StoreBackend,
    *,
    batch_size: int = 100,
    progress: Callable[[int], None] | None = None,
) -> RotationReport:
    """Re-encrypt every token this cluster stores under the current key, one batch per
    transaction (see :meth:`CredentialStore.rotate`)."""
    if batch_size < 1:
        raise ValueError("batch_size must be at least 1")
    current = backend.keyring.current_key_id
    changed, busy, last_id, failures = 0, 0, 0, list[str]()
    while True:
        batch = _rotate_batch(backend, current, after_id=last_id, batch_size=batch_size)
        changed += batch.changed
        busy += batch.busy
        failures += batch.failures
        if batch.last_id is None:
            return RotationReport(current, changed, tuple(failures), busy=busy)
        last_id = batch.last_id
        if progress is not None:
            progress(changed)


def _candidates(backend: StoreBackend, current: str, after_id: int) -> list[ColumnElement[bool]]:
    """This cluster's rows after ``after_id`` sealed under another key than ``current``."""
    return [
        CRED.c.cluster_id == backend.cluster_id,
        CRED.c.key_id != current,
        CRED.c.id > after_id,
    ]


def _rotate_batch(backend: StoreBackend, current: str, *, after_id: int, batch_size: int) -> _Batch:
    """Re-encrypt one batch in one transaction, skipping (and counting) rows locked by
    another writer."""
    batch = _Batch()
    candidates = _candidates(backend, current, after_id)
    with (
        translated_errors("rotating the credential encryption key"),
        backend.writer.begin() as connection,
    ):
        rows = connection.execute(
            select(
                CRED.c.id,
                CRED.c.namespace,
                CRED.c.name,
                CRED.c.sandbox_uid,
                CRED.c.encrypted_token,
            )
            .where(*candidates)
            .order_by(CRED.c.id)
            .limit(batch_size)
            .with_for_update(skip_locked=True)
        ).all()
        # Rows up to the last one taken (or all that are left, when none was) that the
        # locking read skipped: another writer holds them.
        upto = [CRED.c.id <= rows[-1].id] if rows else []
        batch.busy = _count(connection, *candidates, *upto) - len(rows)
        for row in rows:
            subject = f"sandbox {row.namespace}/{row.name}"
            try:
                token = open_token(
                    backend.keyring,
                    row.encrypted_token,
                    sandbox_uid=row.sandbox_uid,
                    subject=subject,
                )
            except CredentialsError as exc:
                batch.failures.append(str(exc))
                continue
            connection.execute(_re_encrypted(backend, row.id, row.sandbox_uid, token))
            batch.changed += 1
    batch.last_id = int(rows[-1].id) if rows else None
    return batch


def _count(connection: Connection, *conditions: ColumnElement[bool]) -> int:
    """How many credential rows match ``conditions`` (a plain read: it takes no locks)."""
    query = select(func.count()).select_from(CRED).where(*conditions)
    return int(connection.execute(query).scalar_one())


def _re_encrypted(backend: StoreBackend, row_id: int, sandbox_uid: str, token: SecretStr) -> Any:
    """The update that stores one row's token sealed again under the current key, recording
    the key that sealed it (the ring may have been re-read since the rotation began)."""
    sealed = seal_token(backend.keyring, token, sandbox_uid=sandbox_uid)
    return (
        update(CRED)
        .where(CRED.c.id == row_id)
        .values(
            encrypted_token=sealed,
            key_id=parse_header(sealed, subject=f"credential row {row_id}")[0],
            version=CRED.c.version + 1,
            updated_at=backend.clock(),
        )
    )


def key_usage(backend: StoreBackend, *, sample_per_key: int = 0) -> KeyUsage:
    """Count this cluster's stored tokens, and those of rows without a cluster id, by the
    key id of their envelopes; and open up to ``sample_per_key`` of this cluster's tokens
    under each key id the ring has, to prove its key of that id is the one that sealed
    them (key ids alone cannot: two keys may share an id)."""
    query = (
        select(
            CRED.c.cluster_id,
            CRED.c.namespace,
            CRED.c.name,
            CRED.c.sandbox_uid,
            CRED.c.encrypted_token,
        )
        .where(or_(CRED.c.cluster_id == backend.cluster_id, CRED.c.cluster_id.is_(None)))
        .order_by(CRED.c.id)
    )
    tally = _Tally(backend, sample_per_key)
    with (
        translated_errors("counting stored tokens by key"),
        backend.reader.connect() as connection,
    ):
        for row in connection.execute(query):
            tally.add(row)
    return tally.usage()


class _Tally:
    """The running counts of :func:`key_usage`."""

    def __init__(self, backend: StoreBackend, sample_per_key: int) -> None:
        self._backend = backend
        self._sample_per_key = sample_per_key
        self._ours: dict[str, int] = {}
        self._unclaimed: dict[str, int] = {}
        self._malformed: list[str] = []
        self._sampled: dict[str, int] = {}
        self._undecryptable: list[tuple[str, str]] = []

    def add(self, row: Any) -> None:
        """Count one row, and open its token if its key id still needs a sample."""
        sandbox = f"{row.namespace}/{row.name}"
        try:
            key_id, _ = parse_header(row.encrypted_token, subject=f"sandbox {sandbox}")
        except DecryptionError:
            self._malformed.append(sandbox)
            return
        counts = self._unclaimed if row.cluster_id is None else self._ours
        counts[key_id] = counts.get(key_id, 0) + 1
        if row.cluster_id is not None and self._wants_sample(key_id):
            self._sample(row, sandbox, key_id)

    def _wants_sample(self, key_id: str) -> bool:
        in_ring = key_id in self._backend.keyring.key_ids
        return in_ring and self._sampled.get(key_id, 0) < self._sample_per_key

    def _sample(self, row: Any, sandbox: str, key_id: str) -> None:
        self._sampled[key_id] = self._sampled.get(key_id, 0) + 1
        try:
            open_token(
                self._backend.keyring,
                row.encrypted_token,
                sandbox_uid=row.sandbox_uid,
                subject=f"sandbox {sandbox}",
            )
        except CredentialsError:
            self._undecryptable.append((sandbox, key_id))

    def usage(self) -> KeyUsage:
        """What was counted."""
        return KeyUsage(
            by_key=self._ours,
            unclaimed_by_key=self._unclaimed,
            malformed=tuple(self._malformed),
            sampled=sum(self._sampled.values()),
            undecryptable=tuple(self._undecryptable),
        )


def key_ids_in_use(backend: StoreBackend) -> dict[str, int]:
    """How many of this cluster's stored tokens each key id encrypts (read from the
    envelopes' key id; a row whose header cannot be read is left out: see
    :func:`key_usage`)."""
    return key_usage(backend).by_key
