"""A sandbox pod that fights the library sync holds one sync slot, never a reconcile worker,
and says so in its status; the operator's record of the sync outlives no sandbox."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from typing import Any

import pytest

from craft_operator.config import Settings
from craft_operator.kube.exec import ExecResult, Stdin
from craft_operator.library import make_s3_client
from craft_operator.reconciler.steps.cli import DELIVER_ARGV
from tests.integration.conftest import SANDBOXES
from tests.integration.helpers import (
    NAMESPACE,
    USER_ID,
    condition,
    event_posted,
    phase,
    pod,
    sandbox,
)
from tests.support.emulator import KubeEmulator
from tests.support.operator import eventually, running_operator
from tests.support.pod_exec import EmulatedPodExec, mark_pod_running
from tests.support.s3 import S3Server

BUCKET = "craft-libraries"
PREFIX = f"public/knowledge/{USER_ID}/user_library/"


@pytest.fixture
def s3_client(s3: S3Server) -> Any:
    client = make_s3_client(endpoint_url=s3.url, region="us-east-1", max_attempts=1)
    client.create_bucket(Bucket=BUCKET)
    client.put_object(Bucket=BUCKET, Key=PREFIX + "notes.md", Body=b"# notes\n" * 1000)
    return client


def is_upload(argv: Sequence[str], stdin: Stdin) -> bool:
    """The library's uploads (the PAT's delivery is another test's subject)."""
    return stdin is not None and tuple(argv) != DELIVER_ARGV


class StoppedCommands:
    """Exec into the emulator's pods, but in the ``stopped`` pods the agent stops every
    shell command that ``chosen`` picks (SIGSTOP on its shell, first thing): it never reads
    its stdin nor runs anything (by default the uploads: tar is never fed)."""

    def __init__(
        self,
        inner: EmulatedPodExec,
        stopped: set[str],
        chosen: Callable[[Sequence[str], Stdin], bool] = is_upload,
    ) -> None:
        self.inner = inner
        self.stopped = stopped
        self.chosen = chosen
        #: How many commands were stopped so far.
        self.held = 0

    async def run(
        self,
        namespace: str,
        pod: str,
        container: str,
        argv: Sequence[str],
        *,
        stdin: Stdin = None,
        timeout: float | None = None,  # noqa: ASYNC109 -- the ExecTransport interface
        max_output_bytes: int | None = None,
    ) -> ExecResult:
        if pod in self.stopped and self.chosen(argv, stdin):
            self.held += 1
            argv = [argv[0], argv[1], "kill -STOP $$\n" + argv[2], *argv[3:]]
        return await self.inner.run(
            namespace,
            pod,
            container,
            argv,
            stdin=stdin,
            timeout=timeout,
            max_output_bytes=max_output_bytes,
        )


async def start(emulator: KubeEmulator, name: str) -> None:
    emulator.create(SANDBOXES, sandbox(name))
    await eventually(lambda: pod(emulator, name), what=f"the pod of {name}")
    mark_pod_running(emulator, NAMESPACE, name)


async def test_a_pod_that_never_reads_its_upload_holds_no_reconcile_worker(
    emulator: KubeEmulator,
    settings: Settings,
    pod_exec: EmulatedPodExec,
    s3: S3Server,
    s3_client: Any,
) -> None:
    # One reconcile worker only: a pass that waited on the stopped pod would starve alice.
    hostile = settings.model_copy(
        update={
            "s3_bucket": BUCKET,
            "s3_endpoint_url": s3.url,
            "workers": 1,
            "library_exec_timeout": 2.0,
        }
    )
    transport = StoppedCommands(pod_exec, {"mallory"})
    async with running_operator(str(emulator.url).rstrip("/"), hostile, exec_transport=transport):
        await start(emulator, "mallory")
        # Its upload stopped in the pod: a sync slot held (the status may say Syncing only
        # for an instant: held for the pass that collects the sync, which fails after 2 s).
        await eventually(lambda: transport.held, what="mallory's upload stopped in its pod")
        await start(emulator, "alice")

        await phase(emulator, "alice", "Ready", within=20)
        timed_out = await eventually(
            lambda: (
                (c := condition(emulator, "mallory", "UserLibrarySynced")).get("reason")
                == "ExecTimedOut"
                and c
            ),
            within=20,
            what="mallory's sync timed out",
        )
        assert timed_out["status"] == "False"
        assert "did not finish within 2s" in timed_out["message"]
        await event_posted(emulator, "mallory", "LibraryExecTimedOut")


async def test_the_record_of_a_synced_library_goes_with_its_sandbox(
    emulator: KubeEmulator,
    settings: Settings,
    pod_exec: EmulatedPodExec,
    s3: S3Server,
    s3_client: Any,
) -> None:
    with_s3 = settings.model_copy(update={"s3_bucket": BUCKET, "s3_endpoint_url": s3.url})
    database = settings.state_dir / "craft-operator.db"

    def records() -> list[tuple[str, str]]:
        with sqlite3.connect(database) as connection:
            return list(connection.execute("SELECT namespace, name FROM craft_library_sync"))

    async with running_operator(str(emulator.url).rstrip("/"), with_s3, exec_transport=pod_exec):
        await start(emulator, "alice")
        await phase(emulator, "alice", "Ready")
        assert records() == [(NAMESPACE, "alice")]

        emulator.remove(SANDBOXES, NAMESPACE, "alice")
        await eventually(lambda: emulator.find(SANDBOXES, NAMESPACE, "alice") is None)

        assert records() == []
