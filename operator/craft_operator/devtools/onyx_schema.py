"""Onyx's ``user`` and ``personal_access_token`` tables, as Onyx's migrations leave them.

For tests, benchmarks and the kind setup only: in production these tables belong to Onyx
and the operator never creates them. The DDL follows the facts in REFERENCE.md (Onyx's
``user`` table is fastapi-users' table keyed by a UUID, with ``is_active``).
"""

from __future__ import annotations

import uuid

from sqlalchemy import Connection, Engine, text

from craft_operator.credentials.tenants import check_tenant_id

_ONYX_DDL = (
    """
    CREATE TABLE IF NOT EXISTS "user" (
        id UUID PRIMARY KEY,
        email VARCHAR(320) NOT NULL UNIQUE,
        hashed_password VARCHAR(1024) NOT NULL DEFAULT '',
        is_active BOOLEAN NOT NULL DEFAULT true,
        is_superuser BOOLEAN NOT NULL DEFAULT false,
        is_verified BOOLEAN NOT NULL DEFAULT false,
        role VARCHAR NOT NULL DEFAULT 'BASIC'
    )
    """,
    """
    CREATE TABLE IF NOT EXISTS personal_access_token (
        id SERIAL PRIMARY KEY,
        name VARCHAR NOT NULL,
        hashed_token VARCHAR(64) NOT NULL UNIQUE,
        token_display VARCHAR NOT NULL,
        user_id UUID NOT NULL REFERENCES "user" (id) ON DELETE CASCADE,
        expires_at TIMESTAMP WITH TIME ZONE,
        created_at TIMESTAMP WITH TIME ZONE NOT NULL DEFAULT now(),
        last_used_at TIMESTAMP WITH TIME ZONE,
        is_revoked BOOLEAN NOT NULL DEFAULT false,
        pat_type VARCHAR NOT NULL DEFAULT 'USER',
        scopes JSONB
    )
    """,
    "CREATE INDEX IF NOT EXISTS ix_personal_access_token_expires_at"
    " ON personal_access_token (expires_at)",
    "CREATE INDEX IF NOT EXISTS ix_pat_user_created"
    " ON personal_access_token (user_id, created_at DESC)",
)


def _in_schema(connection: Connection, schema: str | None) -> None:
    """Make the transaction's unqualified names those of ``schema`` (a tenant's, as in
    multi-tenant Onyx), if given."""
    if schema is not None:
        connection.execute(text(f'SET LOCAL search_path TO "{check_tenant_id(schema)}"'))


def create_onyx_tables(engine: Engine, *, schema: str | None = None) -> None:
    """Create Onyx's ``user`` and ``personal_access_token`` tables on a Postgres database: in
    the default schema, or in the tenant schema ``schema`` (created if need be), as
    multi-tenant Onyx has them."""
    if engine.dialect.name != "postgresql":
        raise ValueError("Onyx's tables are created only on Postgres (Onyx mode)")
    with engine.begin() as connection:
        if schema is not None:
            connection.execute(text(f'CREATE SCHEMA IF NOT EXISTS "{check_tenant_id(schema)}"'))
        _in_schema(connection, schema)
        for statement in _ONYX_DDL:
            connection.execute(text(statement))


def add_user(
    engine: Engine,
    *,
    active: bool = True,
    email: str | None = None,
    user_id: uuid.UUID | None = None,
    schema: str | None = None,
) -> uuid.UUID:
    """Insert an Onyx user (a new id unless given; kept as it is if it exists), in the
    tenant schema ``schema`` if given."""
    user_id = user_id or uuid.uuid4()
    with engine.begin() as connection:
        _in_schema(connection, schema)
        connection.execute(
            text(
                'INSERT INTO "user" (id, email, is_active) VALUES (:id, :email, :active) '
                "ON CONFLICT (id) DO NOTHING"
            ),
            {"id": user_id, "email": email or f"{user_id}@example.com", "active": active},
        )
    return user_id


def set_user_active(
    engine: Engine, user_id: uuid.UUID, active: bool, *, schema: str | None = None
) -> None:
    """Activate or deactivate an Onyx user (in the tenant schema ``schema`` if given)."""
    with engine.begin() as connection:
        _in_schema(connection, schema)
        connection.execute(
            text('UPDATE "user" SET is_active = :active WHERE id = :id'),
            {"id": user_id, "active": active},
        )
