"""``craft-operator db``: the credentials database schema."""

from __future__ import annotations

import click

from craft_operator.cli._store import fail, quiet_logging, settings_or_fail
from craft_operator.credentials import CredentialsError
from craft_operator.credentials.db import create_credentials_engine, describe_url, upgrade


@click.group()
def db() -> None:
    """Manage the credentials database (CRAFT_DATABASE_URL)."""


@db.command("upgrade")
def upgrade_command() -> None:
    """Migrate the operator's table to this version's schema.

    On Onyx's Postgres only the operator's craft_sandbox_credential table is touched (Onyx's
    user and personal_access_token tables must already exist; with CRAFT_ONYX_MULTI_TENANT
    they are in each tenant's schema, checked when a sandbox of the tenant is first served).
    On the embedded SQLite database the personal_access_token table is created as well.
    Safe to run again.
    """
    quiet_logging()
    settings = settings_or_fail()
    try:
        engine = create_credentials_engine(settings.database_url_value)
    except CredentialsError as exc:
        fail(str(exc), code=2)
    try:
        result = upgrade(engine, multi_tenant=settings.onyx_multi_tenant)
    except CredentialsError as exc:
        fail(str(exc))
    finally:
        engine.dispose()
    mode = "Onyx mode (Postgres)" if result.onyx_mode else "embedded SQLite"
    click.echo(f"database: {describe_url(settings.database_url_value)} ({mode})")
    if result.created_pat_table:
        click.echo("created table personal_access_token")
    if result.revision_before == result.revision_after:
        click.echo(f"craft_sandbox_credential: already at revision {result.revision_after}")
    else:
        click.echo(
            f"craft_sandbox_credential: migrated from revision {result.revision_before or 'none'}"
            f" to {result.revision_after}"
        )
