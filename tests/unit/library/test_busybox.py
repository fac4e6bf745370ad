"""The in-pod scripts under BusyBox, standing for a minimal sandbox image.

The sandbox image only promises ``sh`` and ``tar``; BusyBox's versions (and its ``mv``,
``rm``, ``mkdir``, ``rmdir``, ``dirname``, ``cat``) are the smallest common denominator.
Each command runs with a ``PATH`` holding nothing but BusyBox links.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from craft_operator.kube.exec_local import LocalExec
from craft_operator.library import sync_user_library_exec

from .conftest import Bucket

BUSYBOX = shutil.which("busybox")
pytestmark = [
    pytest.mark.s3,
    pytest.mark.skipif(BUSYBOX is None, reason="busybox is not installed (apt install busybox)"),
]
APPLETS = ("sh", "tar", "mv", "rm", "mkdir", "rmdir", "dirname", "cat", "head")


@pytest.fixture
def busybox_pods(tmp_path: Path) -> LocalExec:
    bin_dir = tmp_path / "busybox-bin"
    bin_dir.mkdir()
    assert BUSYBOX is not None
    for applet in APPLETS:
        (bin_dir / applet).symlink_to(BUSYBOX)
    return LocalExec(root=tmp_path / "pods", path=str(bin_dir))


async def test_a_sync_cycle_works_with_busybox_sh_and_tar(
    bucket: Bucket, busybox_pods: LocalExec
) -> None:
    library = busybox_pods.workspace("ns", "pod") / "user_library"

    async def sync() -> int:
        result = await sync_user_library_exec(
            store=bucket.store,
            bucket=bucket.name,
            prefix=bucket.prefix,
            exec_transport=busybox_pods,
            namespace="ns",
            pod="pod",
            container="sandbox",
        )
        return result.copied

    long_name = "/".join(["segment" * 20] * 3) + "/file.txt"
    bucket.put("plain.txt", b"plain")
    bucket.put("ünïcödé/日本.md", b"unicode")
    bucket.put(long_name, b"long")
    bucket.put("-rf", b"dash")
    bucket.put("gone/deep/file", b"gone")
    assert await sync() == 5
    bucket.delete("gone/deep/file")
    bucket.put("gone", b"now a file")
    bucket.put("plain.txt", b"plain v2")

    assert await sync() == 2

    found = {
        path.relative_to(library).as_posix(): path.read_bytes()
        for path in library.rglob("*")
        if path.is_file() and ".craft-sync" not in path.parts
    }
    assert found == {
        "plain.txt": b"plain v2",
        "ünïcödé/日本.md": b"unicode",
        long_name: b"long",
        "-rf": b"dash",
        "gone": b"now a file",
    }
    assert await sync() == 0
