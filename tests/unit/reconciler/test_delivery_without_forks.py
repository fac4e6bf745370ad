"""The delivery scripts' exit codes say what was written, even from a shell that cannot
fork: the agent's processes count towards its pod's pids limit, and a shell that cannot fork
ends at once with 2, which after a PAT's write reads as onyx-cli's own code (a SKILL.md
counted as delivered though none was written, the Onyx server blamed)."""

from __future__ import annotations

import os
import resource
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from craft_operator.builders.pod import PAT_FILE
from craft_operator.kube.exec_local import LocalExec
from craft_operator.reconciler import cli_validation
from craft_operator.reconciler.steps.claimed_skill import SKILL_FILE
from craft_operator.reconciler.steps.cli import (
    DELIVER_ARGV,
    EXIT_NOT_DELIVERED,
    deliver_stdin,
    deliver_with_skill_argv,
)

pytestmark = pytest.mark.unit
TOKEN = b"onyx_pat_canary0123456789abcdefghijklmnopqrstuv"
SKILL = b"---\nname: company-search\n---\nSources: Confluence, Jira\n"
#: A uid no process runs as: with RLIMIT_NPROC at 1 its shell is its one process, and
#: every fork fails (EAGAIN), as in a pod at its pids limit.
POD_UID = 54321


@pytest.fixture
def pod_root() -> Iterator[Path]:
    """A pod's directories, owned by :data:`POD_UID`, under a directory it may traverse."""
    if os.geteuid() != 0:
        pytest.skip("needs root, to run the shell as another uid with a process limit")
    base = Path(tempfile.mkdtemp(prefix="craft-no-fork-", dir="/tmp"))
    base.chmod(0o755)
    root = base / "pod"
    for directory in (Path(PAT_FILE).parent, Path(SKILL_FILE).parent):
        (root / directory.relative_to("/")).mkdir(parents=True)
    for path in [root, *root.rglob("*")]:
        os.chown(path, POD_UID, POD_UID)
    yield root
    shutil.rmtree(base)


def run_unable_to_fork(argv: tuple[str, ...], stdin: bytes, root: Path) -> int:
    """Run the delivery ``argv`` with /bin/sh as :data:`POD_UID`, no fork allowed, its
    paths under ``root``; its exit code."""
    mapped = [
        arg.replace("/run/", f"{root}/run/").replace("/workspace/", f"{root}/workspace/")
        for arg in argv
    ]

    def pod_user_at_its_pids_limit() -> None:
        os.setgid(POD_UID)
        os.setuid(POD_UID)
        resource.setrlimit(resource.RLIMIT_NPROC, (1, 1))

    done = subprocess.run(
        ["/bin/sh", *mapped[1:]],
        input=stdin,
        capture_output=True,
        env={"PATH": "/usr/bin:/bin"},
        preexec_fn=pod_user_at_its_pids_limit,
        timeout=30,
        check=False,
    )
    assert b"fork" in done.stderr.lower(), done.stderr  # the shell met what it is meant to
    return done.returncode


@pytest.mark.parametrize(
    ("argv", "skill"),
    [
        pytest.param(DELIVER_ARGV, None, id="pat"),
        pytest.param(deliver_with_skill_argv(len(TOKEN), len(SKILL)), SKILL, id="pat and skill"),
    ],
)
def test_a_shell_that_cannot_fork_says_the_pat_was_not_delivered(
    pod_root: Path, argv: tuple[str, ...], skill: bytes | None
) -> None:
    code = run_unable_to_fork(argv, deliver_stdin(TOKEN, skill), pod_root)

    assert code == EXIT_NOT_DELIVERED
    assert code not in cli_validation.EXIT_MEANINGS, "never read as onyx-cli's verdict"
    assert not (pod_root / PAT_FILE.lstrip("/")).exists()
    assert not (pod_root / SKILL_FILE.lstrip("/")).exists()


async def test_an_image_without_onyx_cli_still_says_so_once_the_pat_is_written(
    tmp_path: Path,
) -> None:
    """The EXIT trap that speaks for a failed write is gone by the time onyx-cli runs."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("sh", "dd", "mv", "rm", "cat", "mkdir"):
        found = shutil.which(tool)
        assert found is not None
        (bin_dir / tool).symlink_to(found)
    pods = LocalExec(root=tmp_path / "pods", path=str(bin_dir))

    for argv, skill in (
        (DELIVER_ARGV, None),
        (deliver_with_skill_argv(len(TOKEN), len(SKILL)), SKILL),
    ):
        result = await pods.run(
            "ns", "pod", "sandbox", list(argv), stdin=deliver_stdin(TOKEN, skill)
        )

        assert result.exit_code == 127, result.stderr
        assert (pods.credentials_dir("ns", "pod") / "pat").read_bytes() == TOKEN
