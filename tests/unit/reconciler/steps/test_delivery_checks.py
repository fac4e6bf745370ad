"""The delivery scripts install only what came whole: an exec whose caller went away is not
ended, its stdin is (as under the kubelet), so the end of stdin does not mean all of it came.
Run for real, with the image's tools and with BusyBox's, through the local double and through
the real transport over the stand-in API server's websocket."""

from __future__ import annotations

import asyncio
import shutil
import stat
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from craft_operator.kube.exec_local import LocalExec
from craft_operator.reconciler.steps import claimed_skill, cli
from tests.support.exec_api import aiohttp_exec, serve_exec_api

pytestmark = pytest.mark.unit
BUSYBOX = shutil.which("busybox")
TOKEN = b"onyx_pat_canary0123456789abcdefghijklmnopqrstuv"
SKILL = b"---\nname: company-search\n---\n" + b"Sources: Confluence, Jira\n" * 2000
#: Stands for onyx-cli: the delivery ends by running it.
ONYX_CLI = "#!/bin/sh\nexit 0\n"


@pytest.fixture(params=["image tools", "busybox"])
def pods(request: pytest.FixtureRequest, tmp_path: Path) -> LocalExec:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "onyx-cli").write_text(ONYX_CLI)
    (bin_dir / "onyx-cli").chmod(0o755)
    if request.param == "image tools":
        return LocalExec(root=tmp_path / "pods", path=f"{bin_dir}:/usr/bin:/bin")
    if BUSYBOX is None:
        pytest.skip("busybox is not installed (apt install busybox)")
    for applet in ("sh", "dd", "mv", "mkdir", "cat"):  # what the scripts may use
        (bin_dir / applet).symlink_to(BUSYBOX)
    return LocalExec(root=tmp_path / "pods", path=str(bin_dir))


def pat_file(pods: LocalExec) -> Path:
    return pods.credentials_dir("ns", "pod") / "pat"


def skill_file(pods: LocalExec) -> Path:
    return pods.workspace("ns", "pod") / "skills" / "company-search" / "SKILL.md"


async def test_a_whole_pat_line_is_installed_for_the_pods_user_only(pods: LocalExec) -> None:
    stdin = cli.deliver_stdin(TOKEN, None)
    result = await pods.run("ns", "pod", "sandbox", cli.DELIVER_ARGV, stdin=stdin)

    assert result.exit_code == 0, result.stderr
    assert pat_file(pods).read_bytes() == TOKEN
    assert stat.S_IMODE(pat_file(pods).stat().st_mode) == 0o600


@pytest.mark.parametrize("cut", [0, 20, len(TOKEN)])
async def test_a_pat_line_cut_short_is_not_installed(pods: LocalExec, cut: int) -> None:
    result = await pods.run("ns", "pod", "sandbox", cli.DELIVER_ARGV, stdin=TOKEN[:cut])

    assert result.exit_code == cli.EXIT_NOT_DELIVERED
    assert not pat_file(pods).exists()


async def test_a_claim_delivery_that_came_whole_installs_the_pat_and_the_skill(
    pods: LocalExec,
) -> None:
    argv = cli.deliver_with_skill_argv(len(TOKEN), len(SKILL))
    result = await pods.run("ns", "pod", "sandbox", argv, stdin=cli.deliver_stdin(TOKEN, SKILL))

    assert result.exit_code == 0, result.stderr
    assert pat_file(pods).read_bytes() == TOKEN
    assert skill_file(pods).read_bytes() == SKILL


async def test_a_pat_cut_short_in_a_claim_delivery_is_not_installed(pods: LocalExec) -> None:
    argv = cli.deliver_with_skill_argv(len(TOKEN), len(SKILL))
    result = await pods.run("ns", "pod", "sandbox", argv, stdin=TOKEN[:-1])

    assert result.exit_code == cli.EXIT_NOT_DELIVERED
    assert not pat_file(pods).exists()
    assert not skill_file(pods).exists()


@pytest.mark.parametrize("cut", [0, 1, len(SKILL) // 2, len(SKILL) - 1])
async def test_a_skill_cut_short_in_a_claim_delivery_is_not_installed(
    pods: LocalExec, cut: int
) -> None:
    argv = cli.deliver_with_skill_argv(len(TOKEN), len(SKILL))
    result = await pods.run("ns", "pod", "sandbox", argv, stdin=TOKEN + SKILL[:cut])

    assert result.exit_code == cli.EXIT_SKILL_NOT_DELIVERED
    assert pat_file(pods).read_bytes() == TOKEN
    assert not skill_file(pods).exists()


async def test_a_skill_cut_short_alone_leaves_the_one_before_in_place(pods: LocalExec) -> None:
    skill_file(pods).parent.mkdir(parents=True)
    skill_file(pods).write_bytes(b"the skill before")
    argv = claimed_skill.deliver_argv(len(SKILL))

    cut = await pods.run("ns", "pod", "sandbox", argv, stdin=SKILL[:-100])
    assert cut.exit_code != 0
    assert skill_file(pods).read_bytes() == b"the skill before"

    whole = await pods.run("ns", "pod", "sandbox", argv, stdin=SKILL)
    assert whole.exit_code == 0, whole.stderr
    assert skill_file(pods).read_bytes() == SKILL


class SourceBrokeError(Exception):
    """The delivery's stdin source failed midway."""


async def half_then_fail(data: bytes) -> AsyncIterator[bytes]:
    yield data[: len(data) // 2]
    await asyncio.sleep(0.2)  # taken by the command, before the caller goes away
    raise SourceBrokeError("the caller went away")


async def test_a_claim_delivery_abandoned_midway_installs_no_skill(pods: LocalExec) -> None:
    argv = cli.deliver_with_skill_argv(len(TOKEN), len(SKILL))

    with pytest.raises(SourceBrokeError):
        await pods.run("ns", "pod", "sandbox", argv, stdin=half_then_fail(TOKEN + SKILL))
    await pods.settled()  # the command ran on, with the end of its stdin

    assert pat_file(pods).read_bytes() == TOKEN
    assert not skill_file(pods).exists()


async def test_a_skill_delivery_abandoned_midway_over_the_websocket_installs_nothing(
    tmp_path: Path,
) -> None:
    target = tmp_path / "skills" / "SKILL.md"
    argv = ["sh", "-c", claimed_skill.WRITE_SKILL_SCRIPT, "deliver-skill", str(target)]
    argv.append(str(len(SKILL)))

    async with serve_exec_api() as server, aiohttp_exec(server) as transport:
        with pytest.raises(SourceBrokeError):
            await transport.run("ns", "pod", "main", argv, stdin=half_then_fail(SKILL))
        await asyncio.wait_for(server.settled.wait(), 10)

    assert server.frames, "a part of the SKILL.md reached the command"
    assert server.abandoned_exits == [1]
    assert not target.exists()
