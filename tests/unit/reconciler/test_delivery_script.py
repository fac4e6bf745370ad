"""The script of a claim's one exec, run for real: the PAT and the SKILL.md split from one
stdin, each written whole with its own mode, with the image's tools or with BusyBox's."""

from __future__ import annotations

import asyncio
import os
import shutil
import stat
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from craft_operator.builders.pod import PAT_FILE
from craft_operator.kube.exec_local import LocalExec
from craft_operator.reconciler.steps.claimed_skill import SKILL_FILE
from craft_operator.reconciler.steps.cli import (
    DELIVER_ARGV,
    EXIT_NOT_DELIVERED,
    EXIT_SKILL_NOT_DELIVERED,
    NOT_DELIVERED,
    WRITE_PAT_AND_SKILL_SCRIPT,
    WRITE_PAT_SCRIPT,
    deliver_with_skill_argv,
)

pytestmark = pytest.mark.unit
BUSYBOX = shutil.which("busybox")
TOKEN = b"onyx_pat_canary0123456789abcdefghijklmnopqrstuv"
RENEWED = b"onyx_pat_renewed0123456789abcdefghijklmnopqrstu"
SKILL = b"---\nname: company-search\n---\n" + b"Sources: Confluence, Jira\n" * 200


def write_argv(token: bytes) -> list[str]:
    return [
        "sh",
        "-c",
        WRITE_PAT_AND_SKILL_SCRIPT,
        "deliver-pat-and-skill",
        PAT_FILE,
        SKILL_FILE,
        str(len(token)),
        str(len(SKILL)),
    ]


@pytest.fixture(params=["image tools", "busybox"])
def pods(request: pytest.FixtureRequest, tmp_path: Path) -> LocalExec:
    if request.param == "image tools":
        return LocalExec(root=tmp_path / "pods")
    if BUSYBOX is None:
        pytest.skip("busybox is not installed (apt install busybox)")
    bin_dir = tmp_path / "busybox-bin"
    bin_dir.mkdir()
    for applet in ("sh", "dd", "mv", "mkdir", "cat", "rm"):
        (bin_dir / applet).symlink_to(BUSYBOX)
    return LocalExec(root=tmp_path / "pods", path=str(bin_dir))


async def test_the_pat_and_the_skill_are_split_from_one_stdin_and_written_whole(
    pods: LocalExec,
) -> None:
    result = await pods.run("ns", "pod", "sandbox", write_argv(TOKEN), stdin=TOKEN + SKILL)

    assert result.exit_code == 0, result.stderr
    pat = pods.credentials_dir("ns", "pod") / "pat"
    skill = pods.workspace("ns", "pod") / "skills" / "company-search" / "SKILL.md"
    assert pat.read_bytes() == TOKEN
    assert stat.S_IMODE(pat.stat().st_mode) == 0o600
    assert skill.read_bytes() == SKILL
    assert stat.S_IMODE(skill.stat().st_mode) == 0o644
    assert sorted(path.name for path in pat.parent.iterdir()) == ["pat", "pat.started"], (
        "no temporary file left"
    )
    assert [path.name for path in skill.parent.iterdir()] == ["SKILL.md"]


async def test_a_pat_that_cannot_be_written_stops_before_the_skill(pods: LocalExec) -> None:
    argv = write_argv(TOKEN)
    argv[4] = f"{PAT_FILE}-missing-directory/pat"  # the write cannot land

    result = await pods.run("ns", "pod", "sandbox", argv, stdin=TOKEN + SKILL)

    assert result.exit_code == EXIT_NOT_DELIVERED
    assert not (pods.workspace("ns", "pod") / "skills" / "company-search" / "SKILL.md").exists()


async def test_a_skill_that_cannot_be_written_has_its_own_exit_code(pods: LocalExec) -> None:
    skills = pods.workspace("ns", "pod") / "skills"
    skills.mkdir(parents=True)
    (skills / "company-search").write_text("a file where the directory goes")

    result = await pods.run("ns", "pod", "sandbox", write_argv(TOKEN), stdin=TOKEN + SKILL)

    assert result.exit_code == EXIT_SKILL_NOT_DELIVERED
    assert (pods.credentials_dir("ns", "pod") / "pat").read_bytes() == TOKEN


@pytest.mark.parametrize(
    ("argv", "stdin", "exit_code"),
    [
        pytest.param(list(DELIVER_ARGV), TOKEN[:20], EXIT_NOT_DELIVERED, id="pat-alone"),
        pytest.param(write_argv(TOKEN), TOKEN[:20], EXIT_NOT_DELIVERED, id="pat-with-skill"),
        pytest.param(write_argv(TOKEN), TOKEN + SKILL[:50], EXIT_SKILL_NOT_DELIVERED, id="skill"),
    ],
)
async def test_a_delivery_cut_short_installs_nothing_and_leaves_no_file_behind(
    pods: LocalExec, argv: list[str], stdin: bytes, exit_code: int
) -> None:
    result = await pods.run("ns", "pod", "sandbox", argv, stdin=stdin)

    assert result.exit_code == exit_code, result.stderr
    credentials = pods.credentials_dir("ns", "pod")
    assert sorted(path.name for path in credentials.iterdir()) == (
        [] if exit_code == EXIT_NOT_DELIVERED else ["pat", "pat.started"]
    ), "no piece of the token left in a temporary file"
    skills = pods.workspace("ns", "pod") / "skills" / "company-search"
    assert not skills.exists() or list(skills.iterdir()) == []


async def test_a_directory_planted_at_the_pat_or_the_skill_is_refused_never_written_into(
    pods: LocalExec,
) -> None:
    """``mv`` would move the file into it and succeed: the operator would record a PAT or
    a SKILL.md delivered that no one finds where onyx-cli and the agent look."""
    pat = pods.credentials_dir("ns", "pod") / "pat"
    pat.mkdir(parents=True)
    result = await pods.run("ns", "pod", "sandbox", write_argv(TOKEN), stdin=TOKEN + SKILL)
    assert result.exit_code == EXIT_NOT_DELIVERED
    assert list(pat.iterdir()) == []

    pat.rmdir()
    skill = pods.workspace("ns", "pod") / "skills" / "company-search" / "SKILL.md"
    skill.mkdir(parents=True)
    result = await pods.run("ns", "pod", "sandbox", write_argv(TOKEN), stdin=TOKEN + SKILL)
    assert result.exit_code == EXIT_SKILL_NOT_DELIVERED
    assert list(skill.iterdir()) == []


@pytest.mark.parametrize("with_skill", [False, True], ids=["pat", "pat and skill"])
async def test_onyx_cli_is_validated_with_the_pat_delivered_whatever_the_pods_files_say(
    tmp_path: Path, with_skill: bool
) -> None:
    """The agent may swap the installed file for a PAT it knows is live, or leave onyx-cli
    to fall back to the api_key of its config file under $HOME: the PAT this exec was
    given is what onyx-cli is run with, and no config file is in its reach."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    onyx_cli = bin_dir / "onyx-cli"
    onyx_cli.write_text('#!/bin/sh\nprintf \'%s|%s|%s\' "$ONYX_PAT" "$HOME" "$XDG_CONFIG_HOME"\n')
    onyx_cli.chmod(0o755)
    pods = LocalExec(root=tmp_path / "pods", path=f"{bin_dir}:{os.environ['PATH']}")
    if with_skill:
        argv = list(deliver_with_skill_argv(len(TOKEN), len(SKILL)))
        stdin = TOKEN + SKILL
    else:
        argv, stdin = list(DELIVER_ARGV), TOKEN + b"\n"

    result = await pods.run("ns", "pod", "sandbox", argv, stdin=stdin)

    assert result.exit_code == 0, result.stderr
    assert result.stdout == TOKEN + b"|/nonexistent|/nonexistent"


def write_pat_argv(token: bytes, *, with_skill: bool) -> list[str]:
    """The delivery's write of the PAT (and a SKILL.md), without onyx-cli."""
    if with_skill:
        return write_argv(token)
    return ["sh", "-c", f"{WRITE_PAT_SCRIPT} {NOT_DELIVERED}", "deliver-pat", PAT_FILE]


def write_stdin(token: bytes, *, with_skill: bool) -> bytes:
    return token + SKILL if with_skill else token + b"\n"


async def held_until(released: asyncio.Event, data: bytes) -> AsyncIterator[bytes]:
    """Stdin that comes once ``released`` is set: the shell has started, and waits."""
    await released.wait()
    yield data


def running_shell_writes_into(credentials: Path) -> bool:
    """Whether a process naming ``credentials`` in its arguments runs."""
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if str(credentials).encode() in cmdline.read_bytes():
                return True
        except OSError:
            continue  # that process ended meanwhile
    return False


async def shell_started(credentials: Path) -> None:
    """Once a shell writing into ``credentials`` runs, and the pod's clock (hundredths of a
    second) has moved on since it took its start."""
    for _ in range(1000):
        if running_shell_writes_into(credentials):
            await asyncio.sleep(0.05)
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"no shell writing into {credentials} started")


@pytest.mark.parametrize("with_skill", [False, True], ids=["pat", "pat and skill"])
async def test_a_stalled_older_delivery_never_puts_its_pat_over_one_delivered_after_it(
    pods: LocalExec, with_skill: bool
) -> None:
    """A cancelled exec's shell runs on in the pod: one that stalled before its write (its
    exec timed out, the operator stood by) while the renewed PAT was delivered and
    validated must not install the older PAT late (it is then revoked: onyx-cli refused
    in a sandbox that says Ready)."""
    released = asyncio.Event()
    stdin = held_until(released, write_stdin(TOKEN, with_skill=with_skill))
    older = asyncio.ensure_future(
        pods.run("ns", "pod", "sandbox", write_pat_argv(TOKEN, with_skill=with_skill), stdin=stdin)
    )
    await shell_started(pods.credentials_dir("ns", "pod"))

    renewed = await pods.run(
        "ns",
        "pod",
        "sandbox",
        write_pat_argv(RENEWED, with_skill=with_skill),
        stdin=write_stdin(RENEWED, with_skill=with_skill),
    )
    released.set()
    stale = await older

    assert renewed.exit_code == 0, renewed.stderr
    assert stale.exit_code == EXIT_NOT_DELIVERED
    assert b"started after this one" in stale.stderr
    credentials = pods.credentials_dir("ns", "pod")
    assert (credentials / "pat").read_bytes() == RENEWED
    assert sorted(path.name for path in credentials.iterdir()) == ["pat", "pat.started"]


@pytest.mark.parametrize("mark", ["99999999999999", "99999999999999999999999", "x", ""])
async def test_a_later_delivery_replaces_the_pat_whatever_mark_it_finds(
    pods: LocalExec, mark: str
) -> None:
    """A mark from the future (the agent's, or one from before its node restarted), one
    out of range or none at all keeps no delivery out; one delivery after another each
    installs its own."""
    first = await pods.run(
        "ns", "pod", "sandbox", write_pat_argv(TOKEN, with_skill=False), stdin=TOKEN + b"\n"
    )
    assert first.exit_code == 0, first.stderr
    (pods.credentials_dir("ns", "pod") / "pat.started").write_text(mark)

    second = await pods.run(
        "ns", "pod", "sandbox", write_pat_argv(RENEWED, with_skill=False), stdin=RENEWED + b"\n"
    )

    assert second.exit_code == 0, second.stderr
    assert (pods.credentials_dir("ns", "pod") / "pat").read_bytes() == RENEWED
