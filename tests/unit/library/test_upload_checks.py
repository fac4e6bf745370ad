"""An upload applies nothing unless its whole archive came (tar itself stops without a word
at the end of its input between two members, and an exec whose caller went away gets the
end of its stdin early), and a stalled command is reported as one."""

from __future__ import annotations

import io
import shutil
import tarfile
from collections.abc import Sequence
from pathlib import Path

import pytest

from craft_operator.kube.exec import ExecResult, ExecStalledError, Stdin
from craft_operator.kube.exec_local import LocalExec
from craft_operator.library.errors import ExecTimedOutError
from craft_operator.library.transfer import (
    APPLY_SCRIPT,
    UNWRITABLE_EXIT,
    UPLOAD_SCRIPT,
    PodDestination,
    PodTarget,
)

pytestmark = [pytest.mark.unit]
BUSYBOX = shutil.which("busybox")


def archive(members: dict[str, bytes]) -> bytes:
    """A tar of ``members`` as the upload sends it, with its end-of-archive blocks."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def cut_between_members(data: bytes) -> bytes:
    """``data`` without its end-of-archive blocks: cut as if between two members."""
    end = len(data)
    while end >= 512 and data[end - 512 : end] == bytes(512):
        end -= 512
    return data[:end]


@pytest.fixture(params=["image tools", "busybox"])
def pods(request: pytest.FixtureRequest, tmp_path: Path) -> LocalExec:
    if request.param == "image tools":
        return LocalExec(root=tmp_path / "pods")
    if BUSYBOX is None:
        pytest.skip("busybox is not installed (apt install busybox)")
    bin_dir = tmp_path / "busybox-bin"
    bin_dir.mkdir()
    for applet in ("sh", "tar", "mv", "rm", "mkdir", "rmdir", "dirname", "cat", "head"):
        (bin_dir / applet).symlink_to(BUSYBOX)
    return LocalExec(root=tmp_path / "pods", path=str(bin_dir))


async def upload(pods: LocalExec, stdin: bytes) -> tuple[ExecResult, Path]:
    """The first exec of a sync that copies ``new.txt``; its result and the library."""
    library = pods.workspace("ns", "pod") / "user_library"
    argv = ["sh", "-c", UPLOAD_SCRIPT + APPLY_SCRIPT, "sh", "/workspace/user_library"]
    result = await pods.run(
        "ns", "pod", "sandbox", [*argv, "staging.t", "1", "0", "new.txt"], stdin=stdin
    )
    return result, library


WHOLE = {"files/new.txt": b"new\n", "pending": b"pending record\n", "final": b"final record\n"}


async def test_an_upload_whose_archive_came_whole_is_applied(pods: LocalExec) -> None:
    result, library = await upload(pods, archive(WHOLE))

    assert result.exit_code == 0, result.stderr
    assert (library / "new.txt").read_bytes() == b"new\n"


async def test_an_upload_cut_before_its_last_member_applies_nothing(pods: LocalExec) -> None:
    library = pods.workspace("ns", "pod") / "user_library"
    library.mkdir(parents=True)
    (library / "kept.txt").write_bytes(b"kept")
    without_final = {name: data for name, data in WHOLE.items() if name != "final"}

    result, _ = await upload(pods, cut_between_members(archive(without_final)))

    assert result.exit_code != 0
    assert b"ended before the end of its archive" in result.stderr
    assert not (library / "new.txt").exists()
    assert (library / "kept.txt").read_bytes() == b"kept"


async def test_an_upload_into_a_manifest_it_cannot_write_stops_before_unpacking_anything(
    pods: LocalExec,
) -> None:
    """Else tar reads the whole archive, the append to the manifest fails, and each retry
    sends it all again."""
    library = pods.workspace("ns", "pod") / "user_library"
    (library / ".craft-sync" / "manifest").mkdir(parents=True)
    (library / "kept.txt").write_bytes(b"kept")
    data = archive({**WHOLE, "files/new.txt": b"n" * 1_000_000})

    result, _ = await upload(pods, data)

    assert result.exit_code == UNWRITABLE_EXIT
    assert b"manifest is not a regular file the sync can write" in result.stderr
    assert not list((library / ".craft-sync").glob("staging*"))
    assert not (library / "new.txt").exists()
    assert (library / "kept.txt").read_bytes() == b"kept"


class Stalled:
    """A transport whose every call stalls."""

    async def run(
        self,
        namespace: str,
        pod: str,
        container: str,
        argv: Sequence[str],
        *,
        stdin: Stdin = None,
        timeout: float | None = None,  # noqa: ASYNC109 - the ExecTransport interface
        max_output_bytes: int | None = None,
    ) -> ExecResult:
        raise ExecStalledError(f"exec in pod {namespace}/{pod} made no progress for 60s")


async def test_a_stalled_command_is_reported_as_stalled_not_as_out_of_time() -> None:
    destination = PodDestination(Stalled(), PodTarget("ns", "pod", "sandbox"))

    with pytest.raises(ExecTimedOutError) as raised:
        await destination.read_pod_manifest()

    assert raised.value.retryable
    assert "made no progress for 60s" in raised.value.message
    assert "did not finish within" not in raised.value.message
