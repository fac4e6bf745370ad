"""What the credential commands share: one-line failures and opening the store."""

from __future__ import annotations

import contextlib
import logging
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import NoReturn

import click

from craft_operator.config import Settings, SettingsError, load_settings
from craft_operator.credentials import (
    CredentialsError,
    CredentialStore,
    SchemaMissingError,
    build_credential_store,
)
from craft_operator.credentials.db import sqlite_file


def fail(message: str, code: int = 1) -> NoReturn:
    """Print one line to stderr and exit non-zero."""
    click.echo(f"craft-operator: {message}", err=True)
    sys.exit(code)


def settings_or_fail() -> Settings:
    """The operator settings, or a one-line error naming the bad variable."""
    try:
        return load_settings()
    except SettingsError as exc:
        fail(str(exc), code=2)


def quiet_logging() -> None:
    """Warnings only on stderr (the development key ring warning must stay visible)."""
    logging.basicConfig(level=logging.WARNING, format="craft-operator: %(levelname)s %(message)s")


@contextlib.contextmanager
def opened_store(settings: Settings) -> Iterator[CredentialStore]:
    """The credential store for a command; credential errors become one line on stderr.

    A command never migrates the schema (whatever CRAFT_DATABASE_AUTO_MIGRATE says): only
    ``craft-operator db upgrade`` and the operator's start do. A schema at another revision
    than this CLI's stops the command. Nor does it create an SQLite database that is not
    there (a mistyped path would get an empty one, and advice to migrate it).
    """
    missing = _missing_sqlite_file(settings.database_url_value)
    if missing is not None:
        fail(
            f"the SQLite database {missing} does not exist: point CRAFT_DATABASE_URL (or "
            "CRAFT_STATE_DIR) at the operator's own; nothing was created"
        )
    try:
        store = build_credential_store(settings, migrate=False)
    except SchemaMissingError as exc:
        fail(f"{exc} (this command never migrates the schema itself)")
    except CredentialsError as exc:
        fail(str(exc))
    try:
        yield store
    except CredentialsError as exc:
        fail(str(exc))
    finally:
        store.close()


def split_sandbox(ctx: click.Context, param: click.Parameter, value: str) -> tuple[str, str]:
    """Parse ``NAMESPACE/NAME``."""
    namespace, slash, name = value.partition("/")
    if not slash or not namespace or not name or "/" in name:
        raise click.BadParameter("give the sandbox as NAMESPACE/NAME, e.g. team-a/alice")
    return namespace, name


def _missing_sqlite_file(url: str) -> Path | None:
    """The file of an SQLite URL that does not exist (``None``: it does, or not SQLite)."""
    path = sqlite_file(url)
    return None if path is None or path.exists() else path
