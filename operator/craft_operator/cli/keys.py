"""``craft-operator keys``: make and roll the key ring that encrypts stored tokens."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from craft_operator.cli._store import fail, opened_store, quiet_logging, settings_or_fail
from craft_operator.credentials import KeyRingError, generate_key_entry
from craft_operator.doctor.key_ring import SAMPLE_PER_KEY

if TYPE_CHECKING:
    from craft_operator.credentials.rotation import KeyUsage


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
    """Re-encrypt this cluster's stored tokens under the first key of the ring.

    Runs in batches, each committed on its own: safe to interrupt and run again. Rows
    another writer holds are skipped and counted: run again. Rows without a cluster id
    (from before cluster ids) are not rotated, only counted by key: an old key can be
    dropped from the ring only when the summary says so, i.e. when neither this cluster's
    tokens nor such rows use it (adopt those with 'craft-operator credentials adopt', then
    run this again), and only once every operator replica encrypts with the new first key
    and a run after that still finds no token under the old one.
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
        # Key ids alone prove nothing: a key regenerated under an old id seals nothing
        # the tokens of that id were sealed with, and rotation skips them as current.
        usage = store.key_usage(sample_per_key=SAMPLE_PER_KEY)
        for line in summary(usage, store.keyring.key_ids):
            click.echo(line)
    problems = []
    if result.failures:
        problems.append(
            f"{len(result.failures)} token(s) could not be decrypted and were left as they are"
        )
    if result.busy:
        problems.append(
            f"{result.busy} token(s) were busy (held by another writer, e.g. the operator "
            "renewing them) and were skipped: run again"
        )
    if usage.undecryptable:
        wrong = sorted({key for _, key in usage.undecryptable})
        problems.append(
            f"{len(usage.undecryptable)} of {usage.sampled} sampled stored token(s) do not "
            f"open under the ring's key of their id ({', '.join(map(repr, wrong))}): the ring "
            "holds another key under that id; put the original back (the operator revokes "
            "and replaces each PAT whose token does not open)"
        )
    if problems:
        fail("; ".join(problems))


def _by_key(counts: dict[str, int]) -> str:
    """``k1: 3, k2: 5``, or ``none``."""
    return ", ".join(f"{key}: {count}" for key, count in sorted(counts.items())) or "none"


def _some(names: tuple[str, ...], limit: int = 10) -> str:
    """The first ``limit`` names, and how many more there are."""
    shown = ", ".join(names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


def summary(usage: KeyUsage, ring_key_ids: tuple[str, ...]) -> list[str]:
    """What the stored tokens are sealed with, and which of the ring's old keys can go."""
    lines = [f"stored tokens by key: {_by_key(usage.by_key)}"]
    if usage.unclaimed_by_key:
        lines.append(
            "rows without a cluster id (from before cluster ids, not rotated) by key: "
            f"{_by_key(usage.unclaimed_by_key)}"
        )
    if usage.malformed:
        lines.append(
            f"{len(usage.malformed)} row(s) have an unreadable envelope header: "
            f"{_some(usage.malformed)}"
        )
    old = ring_key_ids[1:]
    needed = [key for key in old if usage.by_key.get(key) or usage.unclaimed_by_key.get(key)]
    for key in needed:
        lines.append(f"key {key!r} cannot be dropped from the ring yet: {_users(usage, key)}")
    droppable = [key for key in old if key not in needed]
    if droppable:
        lines.extend(_droppable(droppable, ring_key_ids[0]))
    return lines


def _droppable(keys: list[str], current: str) -> list[str]:
    """The lines on old keys no stored token uses: when they can really go, since an
    operator replica still on the old ring seals new tokens under its first key."""
    return [
        f"no stored token uses key(s) {', '.join(keys)} now",
        f"they can be dropped from the ring once every operator replica encrypts with "
        f"{current!r} and a run of this after that still finds no token under them (a replica "
        "still on the old ring seals new tokens under them)",
        "a replica encrypts with the first key of its own ring: with "
        "CRAFT_ENCRYPTION_KEYS_FILE, of that file in its pod, re-read before each seal (run "
        "this command there: it re-encrypts under that key); with CRAFT_ENCRYPTION_KEYS, of "
        "the ring it was started with",
    ]


def _users(usage: KeyUsage, key: str) -> str:
    """What still uses ``key``, and what to do about it."""
    parts = []
    if usage.by_key.get(key):
        parts.append(
            f"{usage.by_key[key]} of this cluster's token(s) use it (run this again; "
            "'skipped:' lines say why a token was left)"
        )
    if usage.unclaimed_by_key.get(key):
        parts.append(
            f"{usage.unclaimed_by_key[key]} row(s) without a cluster id use it (adopt them "
            "with 'craft-operator credentials adopt', then run this again)"
        )
    return "; ".join(parts)
