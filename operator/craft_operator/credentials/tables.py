"""SQLAlchemy models of the two tables the credential store uses.

* :class:`PersonalAccessToken` is Onyx's ``personal_access_token`` table, declared exactly as
  Onyx declares it (REFERENCE.md). In Onyx mode (Postgres) Onyx owns it and the operator
  never creates or alters it; in the embedded SQLite mode the operator creates it.
* :class:`OnyxUser` is the slice of Onyx's ``user`` table the store reads (``id`` and
  ``is_active``). It is never created by the operator.
* :class:`SandboxCredential` is the operator's own table, migrated with Alembic.

Every model's repr shows ids and times only, never a token, a hash or a ciphertext.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    Boolean,
    DateTime,
    Dialect,
    Enum,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    UniqueConstraint,
    Uuid,
    func,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column
from sqlalchemy.types import TypeDecorator

from craft_operator.credentials.tokens import PatType

PAT_TABLE = "personal_access_token"
USER_TABLE = "user"
CREDENTIAL_TABLE = "craft_sandbox_credential"
LIBRARY_SYNC_TABLE = "craft_library_sync"


class UtcDateTime(TypeDecorator[datetime]):
    """``DateTime(timezone=True)`` that always hands back aware UTC datetimes.

    Postgres already does; SQLite stores no offset, so values are normalised to UTC on the
    way in and marked UTC on the way out. The DDL is that of ``DateTime(timezone=True)``.
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        """Normalise to UTC (SQLite keeps no offset, so it gets the naive UTC time)."""
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetimes are not stored; pass an aware datetime")
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        """Return an aware UTC datetime."""
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


#: JSON on SQLite, JSONB on Postgres (as Onyx declares ``scopes``).
ScopesType = JSON().with_variant(JSONB(), "postgresql")


class OnyxBase(DeclarativeBase):
    """Declarative base of the tables Onyx owns."""

    metadata = MetaData()


class OperatorBase(DeclarativeBase):
    """Declarative base of the tables the operator owns (migrated by Alembic)."""

    metadata = MetaData()


class OnyxUser(OnyxBase):
    """The columns of Onyx's ``user`` table that the store reads."""

    __tablename__ = USER_TABLE

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True)
    is_active: Mapped[bool] = mapped_column(Boolean, nullable=False)

    def __repr__(self) -> str:
        return f"OnyxUser(id={self.id!s}, is_active={self.is_active})"


class PersonalAccessToken(OnyxBase):
    """Onyx's ``personal_access_token`` table."""

    __tablename__ = PAT_TABLE

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String, nullable=False)
    hashed_token: Mapped[str] = mapped_column(String(64), unique=True, nullable=False)
    token_display: Mapped[str] = mapped_column(String, nullable=False)
    user_id: Mapped[uuid.UUID] = mapped_column(
        Uuid, ForeignKey(f"{USER_TABLE}.id", ondelete="CASCADE"), nullable=False
    )
    expires_at: Mapped[datetime | None] = mapped_column(UtcDateTime, nullable=True, index=True)
    created_at: Mapped[datetime] = mapped_column(
        UtcDateTime, server_default=func.now(), nullable=False
    )
    last_used_at: Mapped[datetime | None] = mapped_column(UtcDateTime, nullable=True)
    is_revoked: Mapped[bool] = mapped_column(Boolean, server_default=text("false"), nullable=False)
    pat_type: Mapped[PatType] = mapped_column(
        Enum(PatType, native_enum=False),
        nullable=False,
        server_default=PatType.USER.value,
    )
    scopes: Mapped[list[str] | None] = mapped_column(ScopesType, nullable=True, default=None)

    __table_args__ = (
        Index("ix_pat_user_created", user_id, created_at.desc()),
        # SQLite only (where the operator creates this table): never reuse the id of a
        # deleted row, as Postgres sequences never do.
        {"sqlite_autoincrement": True},
    )

    def __repr__(self) -> str:
        return (
            f"PersonalAccessToken(id={self.id}, pat_type={self.pat_type}, "
            f"is_revoked={self.is_revoked}, expires_at={self.expires_at})"
        )


class SandboxCredential(OperatorBase):
    """The operator's record of one sandbox's PAT: which PAT, and the token encrypted.

    ``pat_id`` deliberately has no foreign key: ``personal_access_token`` belongs to Onyx,
    and a constraint pointing into it would tie Onyx's own migrations to this table.
    ``version`` increases on every change, for optimistic concurrency control.
    """

    __tablename__ = CREDENTIAL_TABLE

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    namespace: Mapped[str] = mapped_column(String(63), nullable=False)
    name: Mapped[str] = mapped_column(String(253), nullable=False)
    sandbox_uid: Mapped[str] = mapped_column(String(64), nullable=False, index=True)
    user_id: Mapped[uuid.UUID] = mapped_column(Uuid, nullable=False)
    tenant_id: Mapped[str] = mapped_column(String(63), nullable=False)
    pat_id: Mapped[int] = mapped_column(Integer, nullable=False)
    token_display: Mapped[str] = mapped_column(String(32), nullable=False)
    encrypted_token: Mapped[bytes] = mapped_column(LargeBinary, nullable=False)
    key_id: Mapped[str] = mapped_column(String(64), nullable=False, index=True)
    version: Mapped[int] = mapped_column(Integer, nullable=False, default=1)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime, nullable=False)
    expires_at: Mapped[datetime] = mapped_column(UtcDateTime, nullable=False)
    updated_at: Mapped[datetime] = mapped_column(UtcDateTime, nullable=False)
    #: The cluster whose operator wrote the row (``CRAFT_CLUSTER_ID``): each cluster has
    #: its own row per sandbox name. NULL on rows from before the column existed, which
    #: belong to no cluster until one proves them its own (see migration 0002).
    cluster_id: Mapped[str | None] = mapped_column(String(128), nullable=True)
    #: The PAT this row's PAT renewed, left live for a grace period (its ``expires_at``
    #: shortened to the end of it) until the pod is shown to use the new one; NULL when
    #: none (see migration 0004).
    superseded_pat_id: Mapped[int | None] = mapped_column(Integer, nullable=True)
    #: When the row's sandbox (``sandbox_uid``) was created, as its creationTimestamp: a
    #: pass for an earlier sandbox of that name, running late, never replaces the row of
    #: a later one. NULL when not known (rows from before migration 0007).
    sandbox_created_at: Mapped[datetime | None] = mapped_column(UtcDateTime, nullable=True)

    __table_args__ = (
        UniqueConstraint(
            "cluster_id", "namespace", "name", name="uq_craft_sandbox_credential_cluster_sandbox"
        ),
    )

    def __repr__(self) -> str:
        return (
            f"SandboxCredential(namespace={self.namespace!r}, name={self.name!r}, "
            f"pat_id={self.pat_id}, key_id={self.key_id!r}, expires_at={self.expires_at})"
        )


class LibrarySyncRecord(OperatorBase):
    """The operator's record of the user library it synced into a sandbox's pod.

    The pod can rewrite its own copy of the manifest; this row it cannot. ``entries`` is
    the library as synced (zlib-compressed JSON, see :mod:`craft_operator.library.record`),
    ``digests`` the SHA-256 of every manifest the pod may hold if nobody else touched it.
    """

    __tablename__ = LIBRARY_SYNC_TABLE

    sandbox_uid: Mapped[str] = mapped_column(String(64), primary_key=True)
    namespace: Mapped[str] = mapped_column(String(63), nullable=False)
    name: Mapped[str] = mapped_column(String(253), nullable=False)
    pod_uid: Mapped[str] = mapped_column(String(64), nullable=False)
    digests: Mapped[str] = mapped_column(String(400), nullable=False)
    lines: Mapped[int] = mapped_column(Integer, nullable=False)
    entries: Mapped[bytes] = mapped_column(LargeBinary, nullable=False)
    updated_at: Mapped[datetime] = mapped_column(UtcDateTime, nullable=False)

    def __repr__(self) -> str:
        return (
            f"LibrarySyncRecord(namespace={self.namespace!r}, name={self.name!r}, "
            f"pod_uid={self.pod_uid!r}, lines={self.lines})"
        )


def column_names(model: type[Any]) -> list[str]:
    """The column names of a mapped model, for tests and diagnostics."""
    return [column.name for column in model.__table__.columns]
