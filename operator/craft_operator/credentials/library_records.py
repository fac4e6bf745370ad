"""The ``craft_library_sync`` table: the operator's record of each sandbox's synced library.

Kept in the credentials database because the sandbox pod can reach neither it nor the
operator's own process (a ConfigMap would do only where the agent has no API access to its
namespace, and is capped at 1 MiB). Blocking calls: run them in a worker thread.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import cast

from sqlalchemy import Engine, Table, delete, select
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from craft_operator.credentials.db import WRITE_OPTION, is_onyx_mode, translated_errors
from craft_operator.credentials.tables import LibrarySyncRecord, SandboxCredential
from craft_operator.library.record import SyncRecord, decode_entries, encode_entries

_TABLE = cast(Table, LibrarySyncRecord.__table__)
_CREDENTIALS = cast(Table, SandboxCredential.__table__)


def load_record(engine: Engine, sandbox_uid: str) -> SyncRecord | None:
    """The record of the sandbox with this uid, if the operator synced its library."""
    with translated_errors("reading the library sync record"), engine.connect() as connection:
        row = connection.execute(
            select(_TABLE.c.pod_uid, _TABLE.c.entries, _TABLE.c.lines, _TABLE.c.digests).where(
                _TABLE.c.sandbox_uid == sandbox_uid
            )
        ).one_or_none()
    if row is None:
        return None
    return SyncRecord(
        pod_uid=row.pod_uid,
        entries=decode_entries(row.entries),
        lines=row.lines,
        digests=tuple(filter(None, row.digests.split(","))),
    )


def save_record(
    engine: Engine, *, sandbox_uid: str, namespace: str, name: str, record: SyncRecord
) -> bool:
    """Insert or replace the sandbox's record; ``False`` (nothing written) if the sandbox
    has no credential row any more: a sync that ran on while its sandbox was deleted, or
    recreated, must not leave a record that nothing deletes. The row is locked until the
    record is written, so a revocation deleting it waits, and deletes the record after."""
    values = {
        "sandbox_uid": sandbox_uid,
        "namespace": namespace,
        "name": name,
        "pod_uid": record.pod_uid,
        "entries": encode_entries(record.entries),
        "lines": record.lines,
        "digests": ",".join(dict.fromkeys(record.digests)),
        "updated_at": datetime.now(UTC),
    }
    insert = pg_insert(_TABLE) if is_onyx_mode(engine) else sqlite_insert(_TABLE)
    statement = insert.values(**values).on_conflict_do_update(
        index_elements=[_TABLE.c.sandbox_uid],
        set_={key: value for key, value in values.items() if key != "sandbox_uid"},
    )
    writer = engine.execution_options(**{WRITE_OPTION: True})
    owned = select(_CREDENTIALS.c.id).where(_CREDENTIALS.c.sandbox_uid == sandbox_uid)
    with translated_errors("writing the library sync record"), writer.begin() as connection:
        if connection.execute(owned.with_for_update(read=True)).first() is None:
            return False
        connection.execute(statement)
    return True


def delete_record(engine: Engine, sandbox_uid: str) -> bool:
    """Forget the sandbox's record (it is being deleted); False if it had none."""
    writer = engine.execution_options(**{WRITE_OPTION: True})
    with translated_errors("deleting the library sync record"), writer.begin() as connection:
        result = connection.execute(delete(_TABLE).where(_TABLE.c.sandbox_uid == sandbox_uid))
    return bool(result.rowcount)
