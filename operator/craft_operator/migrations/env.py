"""Alembic environment: migrates only the operator's tables, on a connection it is given."""

from __future__ import annotations

from alembic import context
from sqlalchemy.engine import Connection

from craft_operator.credentials.db import VERSION_TABLE
from craft_operator.credentials.tables import OperatorBase

config = context.config
target_metadata = OperatorBase.metadata


def include_object(
    obj: object, name: str | None, type_: str, reflected: bool, compare_to: object
) -> bool:
    """Autogenerate sees only the operator's tables, never Onyx's."""
    if type_ == "table":
        return name in target_metadata.tables
    return True


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if not isinstance(connection, Connection):
        raise RuntimeError("run migrations through craft-operator db upgrade")
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        version_table=VERSION_TABLE,
        include_object=include_object,
        render_as_batch=connection.dialect.name == "sqlite",
        transaction_per_migration=False,
    )
    with context.begin_transaction():
        context.run_migrations()


if context.is_offline_mode():
    raise RuntimeError("offline (SQL script) migrations are not supported")
run_migrations_online()
