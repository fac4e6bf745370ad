"""What the operator's database says about PATs, read as the tests' judge."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from craft_operator.credentials.tables import PersonalAccessToken, SandboxCredential


def live_pats_and_rows(database_url: str, namespace: str) -> tuple[dict[int, str], list[Any]]:
    """The live PATs (id: hashed token) and the namespace's credential rows."""
    engine = sa.create_engine(database_url)
    try:
        with engine.connect() as connection:
            live = connection.execute(
                sa.select(PersonalAccessToken.id, PersonalAccessToken.hashed_token).where(
                    PersonalAccessToken.is_revoked.is_(False)
                )
            ).all()
            rows = connection.execute(
                sa.select(
                    SandboxCredential.name, SandboxCredential.sandbox_uid, SandboxCredential.pat_id
                ).where(SandboxCredential.namespace == namespace)
            ).all()
    finally:
        engine.dispose()
    return {row.id: row.hashed_token for row in live}, list(rows)
