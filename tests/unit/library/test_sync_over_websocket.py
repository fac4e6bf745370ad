"""Exec-mode sync through the operator's real exec transport: AiohttpExec over the
websocket of a stand-in API server (:mod:`tests.support.exec_api`), into this machine."""

from __future__ import annotations

from pathlib import Path

import pytest

from craft_operator.kube.exec_aiohttp import AiohttpExec
from craft_operator.library import SyncResult, sync_user_library_exec
from tests.support.exec_api import aiohttp_exec, serve_exec_api

from .conftest import Bucket

pytestmark = [pytest.mark.unit]


async def sync(transport: AiohttpExec, bucket: Bucket, root: Path) -> SyncResult:
    """One exec-mode sync of ``bucket``'s library into ``root``."""
    return await sync_user_library_exec(
        store=bucket.store,
        bucket=bucket.name,
        prefix=bucket.prefix,
        exec_transport=transport,
        namespace="ns",
        pod="pod",
        container="main",
        root=str(root),
    )


@pytest.mark.s3
async def test_an_exec_mode_sync_over_the_websocket_lands_whole_files(
    bucket: Bucket, tmp_path: Path
) -> None:
    bucket.put("a.txt", b"a" * 70_000)
    bucket.put("dir/b.txt", b"b")
    root = tmp_path / "user_library"

    async with serve_exec_api() as server, aiohttp_exec(server) as transport:
        first = await sync(transport, bucket, root)
        bucket.put("dir/b.txt", b"changed")
        second = await sync(transport, bucket, root)

    assert (first.copied, second.copied) == (2, 1)
    assert (root / "a.txt").read_bytes() == b"a" * 70_000
    assert (root / "dir" / "b.txt").read_bytes() == b"changed"
    assert second.bytes_transferred < 5_000
