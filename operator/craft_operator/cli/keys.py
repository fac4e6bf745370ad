"""``craft-operator keys``: make and roll the key ring that encrypts stored tokens."""

from __future__ import annotations

import click

from craft_operator.cli._store import fail, opened_store, quiet_logging, settings_or_fail
from craft_operator.credentials import KeyRingError, generate_key_entry


@click.group()
def keys() -> None:
    """Manage the key ring (CRAFT_ENCRYPTION_KEYS) that encrypts stored PATs."""


@keys.command()
@click.option(
    "--id",
    "key_id",
    metavar="ID",
    help="Key id (letters, digits, '.', '_', '-'); default: k<UTC timestamp>.",
)
def generate(key_id: str | None) -> None:
    """Print a new random AES-256 key entry, id:base64key.

    Put it first in CRAFT_ENCRYPTION_KEYS (keep the old keys after it), roll the operator
    out, then run 'craft-operator keys rotate'.
    """
    try:
        entry = generate_key_entry(key_id)
    except KeyRingError as exc:
        fail(str(exc), code=2)
    click.echo(entry.get_secret_value())


@keys.command()
@click.option(
    "--batch-size",
    default=100,
    show_default=True,
    type=click.IntRange(min=1),
    help="Tokens re-encrypted per transaction.",
)
def rotate(batch_size: int) -> None:
    """Re-encrypt every stored token under the first key of the ring.

    Runs in batches, each committed on its own: safe to interrupt and run again. When it
    reports no token under an old key, that key can be dropped from the ring.
    """
    quiet_logging()
    settings = settings_or_fail()
    with opened_store(settings) as store:
        result = store.rotate(
            batch_size=batch_size,
            progress=lambda done: click.echo(f"re-encrypted {done} so far", err=True),
        )
        for failure in result.failures:
            click.echo(f"craft-operator: skipped: {failure}", err=True)
        click.echo(f"re-encrypted {result.changed} stored token(s) under key {result.key_id!r}")
        in_use = store.key_ids_in_use()
        summary = ", ".join(f"{key}: {count}" for key, count in sorted(in_use.items()))
        click.echo(f"stored tokens by key: {summary or 'none'}")
    if result.failures:
        fail(f"{len(result.failures)} token(s) could not be decrypted and were left as they are")
