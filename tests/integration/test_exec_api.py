"""The emulator's exec API speaks the real protocol: the operator's real transport works on it.

An operator in another process (the resilience suite, the load benchmark) can only reach
pods through the API server's exec endpoint, so the endpoint must behave like the real one
for :class:`AiohttpExec`: refuse pods that are gone or not running, carry stdin until
the v5 close frame, and report the exit code in the status channel.
"""

from __future__ import annotations

import asyncio
import io
import tarfile
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import kopf
import pytest

from craft_operator.kube.client import KubeClient
from craft_operator.kube.exec import ExecUnavailableError
from craft_operator.kube.exec_aiohttp import AiohttpExec
from tests.support.emulator import KubeEmulator
from tests.support.pod_exec import EmulatedPodExec, mark_pod_running

NAMESPACE = "team"


def pod_manifest(name: str) -> dict[str, object]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [
                {
                    "name": "sandbox",
                    "image": "craft-sandbox",
                    "securityContext": {
                        "allowPrivilegeEscalation": False,
                        "capabilities": {"drop": ["ALL"]},
                    },
                }
            ],
        },
    }


@pytest.fixture
async def transport(emulator: KubeEmulator) -> AsyncIterator[AiohttpExec]:
    kube = KubeClient(request_timeout=10)
    kube.configure(kopf.ConnectionInfo(server=str(emulator.url).rstrip("/"), insecure=True))
    yield AiohttpExec(kube, frame_bytes=1024)
    await kube.close()


@pytest.fixture
def pods(emulator: KubeEmulator, tmp_path: Path) -> EmulatedPodExec:
    double = EmulatedPodExec(emulator, tmp_path / "pods", scripted_cli=lambda *_: 4)
    double.serve_exec_api()
    return double


async def test_a_command_runs_with_its_exit_code_and_output(
    emulator: KubeEmulator, transport: AiohttpExec, pods: EmulatedPodExec
) -> None:
    emulator.create("v1/pods", pod_manifest("alice"))
    mark_pod_running(emulator, NAMESPACE, "alice")

    listing = await transport.run(NAMESPACE, "alice", "sandbox", ["sh", "-c", "echo hi; exit 3"])
    cli = await transport.run(NAMESPACE, "alice", "sandbox", ["onyx-cli", "validate-config"])

    assert (listing.exit_code, listing.stdout) == (3, b"hi\n")
    assert cli.exit_code == 4
    assert pods.calls[-1] == (NAMESPACE, "alice", ("onyx-cli", "validate-config"))


async def test_stdin_larger_than_a_frame_arrives_whole_before_the_command_ends(
    emulator: KubeEmulator, transport: AiohttpExec, pods: EmulatedPodExec
) -> None:
    emulator.create("v1/pods", pod_manifest("alice"))
    mark_pod_running(emulator, NAMESPACE, "alice")
    payload = bytes(range(256)) * 200  # 51,200 bytes: fifty 1 KiB frames
    archive = io.BytesIO()
    with tarfile.open(fileobj=archive, mode="w") as tar:
        info = tarfile.TarInfo("notes.bin")
        info.size = len(payload)
        tar.addfile(info, io.BytesIO(payload))

    result = await transport.run(
        NAMESPACE,
        "alice",
        "sandbox",
        ["tar", "-x", "-C", "/workspace"],
        stdin=archive.getvalue(),
    )

    assert result.exit_code == 0, result.stderr
    written = pods.local.workspace(NAMESPACE, "alice") / "notes.bin"
    assert written.read_bytes() == payload


@pytest.mark.parametrize("state", ["missing", "pending"])
async def test_a_pod_that_cannot_run_commands_is_refused_before_the_upgrade(
    emulator: KubeEmulator, transport: AiohttpExec, pods: EmulatedPodExec, state: str
) -> None:
    if state == "pending":
        emulator.create("v1/pods", pod_manifest("alice"))

    with pytest.raises(ExecUnavailableError, match="alice"):
        await asyncio.wait_for(
            transport.run(NAMESPACE, "alice", "sandbox", ["true"], timeout=10), 20
        )
    assert pods.calls == []


async def test_calls_waiting_for_stdin_do_not_starve_the_loops_own_threads(
    emulator: KubeEmulator, transport: AiohttpExec, pods: EmulatedPodExec
) -> None:
    # The library sync's stdin is produced with the default pool (S3 reads). If exec calls
    # ran there too, calls waiting for stdin would hold every thread and deadlock.
    emulator.create("v1/pods", pod_manifest("alice"))
    mark_pod_running(emulator, NAMESPACE, "alice")
    asyncio.get_running_loop().set_default_executor(ThreadPoolExecutor(max_workers=1))

    async def produced_in_a_thread(index: int) -> AsyncIterator[bytes]:
        yield await asyncio.to_thread(lambda: f"part {index}\n".encode())

    results = await asyncio.wait_for(
        asyncio.gather(
            *(
                transport.run(
                    NAMESPACE, "alice", "sandbox", ["cat"], stdin=produced_in_a_thread(index)
                )
                for index in range(3)
            )
        ),
        30,
    )

    assert [r.stdout for r in results] == [f"part {index}\n".encode() for index in range(3)]
