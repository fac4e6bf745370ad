"""``craft-operator sync-user-library``: sync a user library from S3 into a directory.

The sync Job runs this in Job mode; it also works by hand. Exit codes: 0 synced, 1 a
failure that may pass (S3 outage, library changed during the sync, an I/O error of the
volume), 2 bad usage or settings, 3 a failure that needs someone to act (over a cap, no
bucket, access denied, a full volume).
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import sys
from collections.abc import Awaitable
from pathlib import Path
from typing import Any

import click

from craft_operator.api.constants import URL_PATTERN
from craft_operator.config import (
    LEGACY_S3_BUCKET_PATTERN,
    S3_REGION_MESSAGE,
    S3_REGION_PATTERN,
    Settings,
    SettingsError,
    load_settings,
)
from craft_operator.library.errors import LibrarySyncError
from craft_operator.library.local import MANIFEST_READ_LIMIT
from craft_operator.library.location import caps_from_settings
from craft_operator.library.plan import SyncCaps
from craft_operator.library.s3 import S3ObjectStore, make_s3_store
from craft_operator.library.sync import SyncResult, sync_user_library_local

logger = logging.getLogger(__name__)

EXIT_RETRYABLE = 1
EXIT_USAGE = 2
EXIT_PERMANENT = 3
#: The reason of a failure no other error describes (as the Exec-mode pool reports it).
UNEXPECTED = LibrarySyncError.reason
#: Kubernetes keeps at most 4096 bytes of a termination message.
RESULT_FILE_LIMIT = 4096


async def _closing(store: S3ObjectStore, sync: Awaitable[SyncResult]) -> SyncResult:
    """``sync``'s result, with the store's connections closed however it ends."""
    try:
        return await sync
    finally:
        await store.close()


def _fail(message: str, code: int, result_file: Path | None, extra: dict[str, Any]) -> None:
    click.echo(f"craft-operator sync-user-library: {message}", err=True)
    if result_file is not None:
        _write_result(result_file, {"ok": False, "error": message, **extra})
    sys.exit(code)


def _bad_option(bucket: str, endpoint_url: str | None, region: str | None) -> str | None:
    """What is wrong with the S3 options, as the settings check them, or None."""
    checks = (
        (
            "--bucket",
            bucket,
            LEGACY_S3_BUCKET_PATTERN,
            "must be an S3 bucket name: 3 to 255 letters, digits, '.', '_' and '-', "
            "starting and ending with a letter or digit",
        ),
        ("--endpoint-url", endpoint_url, URL_PATTERN, "must be an http:// or https:// URL"),
        ("--region", region, S3_REGION_PATTERN, S3_REGION_MESSAGE),
    )
    for option, value, pattern, message in checks:
        # The value is not quoted: an endpoint URL may carry credentials.
        if value is not None and not re.fullmatch(pattern, value):
            return f"{option}: {message}"
    return None


def _write_result(path: Path, payload: dict[str, Any]) -> None:
    """Write a compact result (the sync Job's termination message) within 4096 bytes."""
    text = json.dumps(payload, separators=(",", ":"))
    while len(text.encode()) > RESULT_FILE_LIMIT and payload.get("skippedKeys"):
        payload["skippedKeys"] = payload["skippedKeys"][: len(payload["skippedKeys"]) // 2]
        payload["skippedKeysTruncated"] = True
        text = json.dumps(payload, separators=(",", ":"))
    if len(text.encode()) > RESULT_FILE_LIMIT:
        text = json.dumps({"ok": payload.get("ok", False), "error": "result too large"})
    try:
        path.write_text(text)
    except OSError as exc:
        click.echo(f"craft-operator sync-user-library: cannot write {path}: {exc}", err=True)


@click.command("sync-user-library")
@click.option("--bucket", required=True, help="S3 bucket of the library.")
@click.option("--prefix", required=True, help="Key prefix of the library, e.g. t/knowledge/u/…/")
@click.option(
    "--dest",
    required=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="Directory to sync into (created if missing).",
)
@click.option("--exclude", "excludes", multiple=True, metavar="GLOB", help="Never sync (repeat).")
@click.option(
    "--disabled", multiple=True, metavar="PATH", help="Sync-disabled path and all under it."
)
@click.option("--endpoint-url", metavar="URL", help="S3 endpoint; default CRAFT_S3_ENDPOINT_URL.")
@click.option("--region", help="S3 region; default CRAFT_S3_REGION.")
@click.option("--max-file-bytes", type=click.IntRange(min=1), help="Per-file cap.")
@click.option("--max-total-bytes", type=click.IntRange(min=1), help="Whole-library cap.")
@click.option("--max-files", type=click.IntRange(min=1), help="Most files in the library.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of a line.")
@click.option("-v", "--verbose", is_flag=True, help="Log each skipped key and S3 request issue.")
@click.option(
    "--result-file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Also write a compact JSON result here (the Job uses /dev/termination-log).",
)
def sync_user_library(
    bucket: str,
    prefix: str,
    dest: Path,
    excludes: tuple[str, ...],
    disabled: tuple[str, ...],
    endpoint_url: str | None,
    region: str | None,
    max_file_bytes: int | None,
    max_total_bytes: int | None,
    max_files: int | None,
    as_json: bool,
    verbose: bool,
    result_file: Path | None,
) -> None:
    """Sync a user library from S3 into DEST: copy what changed, delete what is gone.

    Unsafe keys (absolute, '..', control characters, over-long, colliding) are skipped and
    reported. Files are written aside and renamed into place; the manifest in
    DEST/.craft-sync is written last, so an interrupted run is repaired by the next one.
    S3 credentials come from the usual AWS environment variables or instance role.
    """
    logging.basicConfig(
        level=logging.INFO if verbose else logging.ERROR,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    problem = _bad_option(bucket, endpoint_url, region)
    if problem is not None:
        _fail(problem, EXIT_USAGE, result_file, {})
        return
    try:
        settings = load_settings()
    except SettingsError as exc:
        _fail(str(exc), EXIT_USAGE, result_file, {})
        return
    caps = _caps(settings, max_file_bytes, max_total_bytes, max_files)
    try:
        store = make_s3_store(
            endpoint_url=endpoint_url or settings.s3_endpoint_url,
            region=region or settings.s3_region,
            max_attempts=3,
        )
        result: SyncResult = asyncio.run(
            _closing(
                store,
                sync_user_library_local(
                    store=store,
                    bucket=bucket,
                    prefix=prefix,
                    dest=dest,
                    excludes=excludes,
                    disabled=disabled,
                    caps=caps,
                ),
            )
        )
    except LibrarySyncError as exc:
        # A lasting refusal fails the Job at once; the operator, told it is retryable by
        # the result file, starts another after its backoff.
        code = EXIT_RETRYABLE if exc.retryable and not exc.lasting else EXIT_PERMANENT
        extra = {"reason": exc.reason, "retryable": exc.retryable}
        _fail(exc.message, code, result_file, extra)
        return
    except Exception as exc:
        # A bug, or a volume the agent made that the writer did not foresee: the Job still
        # reports, as retryable. Only the type is said (a message may quote a key or a
        # credential); the traceback goes to the log.
        logger.exception("the sync failed unexpectedly")
        message = f"the sync failed unexpectedly ({type(exc).__name__}; see the Job's log)"
        extra = {"reason": UNEXPECTED, "retryable": True}
        _fail(message, EXIT_RETRYABLE, result_file, extra)
        return
    _report(result, result_file=result_file, as_json=as_json)


def _caps(
    settings: Settings,
    max_file_bytes: int | None,
    max_total_bytes: int | None,
    max_files: int | None,
) -> SyncCaps:
    """The caps given on the command line, else the settings' (``CRAFT_LIBRARY_MAX_*``);
    the manifest may grow to what the local destination reads of it."""
    defaults = caps_from_settings(settings)
    return SyncCaps(
        max_file_bytes=max_file_bytes or defaults.max_file_bytes,
        max_total_bytes=max_total_bytes or defaults.max_total_bytes,
        max_files=max_files or defaults.max_files,
        max_manifest_bytes=MANIFEST_READ_LIMIT,
    )


def _report(result: SyncResult, *, result_file: Path | None, as_json: bool) -> None:
    """Write the result file, if any, and print the result (JSON or one line)."""
    payload = result.to_json()
    if result_file is not None:
        _write_result(result_file, {"ok": True, **payload})
    if as_json:
        click.echo(json.dumps(payload, ensure_ascii=False))
    else:
        click.echo(result.summary())
