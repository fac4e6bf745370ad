"""A local stand-in for pod exec: runs the same argv on this machine.

Used by the user-library tests, the integration tests and the reconciler's tests in place
of :class:`~craft_operator.kube.exec.KubernetesExec`. Every argument that is ``/workspace``
or starts with ``/workspace/`` is rewritten to the pod's own directory under ``root``
(``<root>/<namespace>/<pod>/workspace``), so scripts written for the sandbox image run
unchanged against a temporary directory with the real ``sh`` and ``tar``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from craft_operator.kube.exec import (
    ExecOutputTooLargeError,
    ExecResult,
    ExecTimeoutError,
    ExecUnavailableError,
    Stdin,
)
from craft_operator.kube.exec import stdin_chunks as _chunks

WORKSPACE = "/workspace"
#: The output cap when a call names none (as :class:`~craft_operator.kube.exec.KubernetesExec`).
DEFAULT_MAX_OUTPUT_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True)
class ExecCall:
    """One recorded call: where it ran, its argv as sent, and how many stdin bytes it got."""

    namespace: str
    pod: str
    container: str
    argv: tuple[str, ...]
    stdin_bytes: int
    exit_code: int | None


@dataclass
class LocalExec:
    """:class:`~craft_operator.kube.exec.ExecTransport` that runs commands locally.

    ``missing_pods`` lists ``namespace/pod`` names that answer like a pod that is gone
    (:class:`ExecUnavailableError`), for tests of the error paths. ``path`` is the ``PATH``
    commands run with (e.g. a directory of BusyBox links, to stand for a minimal image).
    """

    root: Path
    calls: list[ExecCall] = field(default_factory=list)
    missing_pods: set[str] = field(default_factory=set)
    path: str = field(default_factory=lambda: os.environ.get("PATH", "/usr/bin:/bin"))

    def workspace(self, namespace: str, pod: str) -> Path:
        """The local directory that stands for ``/workspace`` in that pod."""
        return self.root / namespace / pod / "workspace"

    def _map(self, namespace: str, pod: str, arg: str) -> str:
        if arg == WORKSPACE or arg.startswith(WORKSPACE + "/"):
            return str(self.workspace(namespace, pod)) + arg[len(WORKSPACE) :]
        return arg

    async def run(
        self,
        namespace: str,
        pod: str,
        container: str,
        argv: Sequence[str],
        *,
        stdin: Stdin = None,
        timeout: float | None = None,  # noqa: ASYNC109 - same signature as the protocol
        max_output_bytes: int | None = None,
    ) -> ExecResult:
        """Run ``argv`` locally; see :meth:`~craft_operator.kube.exec.ExecTransport.run`."""
        if f"{namespace}/{pod}" in self.missing_pods:
            raise ExecUnavailableError(f"pod {namespace}/{pod} was not found")
        if not argv:
            raise ValueError("argv must not be empty")
        self.workspace(namespace, pod).mkdir(parents=True, exist_ok=True)
        local = [self._map(namespace, pod, arg) for arg in argv]
        local[0] = shutil.which(local[0], path=self.path) or local[0]
        process = await asyncio.create_subprocess_exec(
            *local,
            stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env={"PATH": self.path, "LC_ALL": "C.UTF-8"},
            start_new_session=True,
        )
        sent = 0

        async def feed() -> None:
            nonlocal sent
            assert process.stdin is not None
            try:
                async for chunk in _chunks(stdin):
                    process.stdin.write(chunk)
                    sent += len(chunk)
                    await process.stdin.drain()
            except (BrokenPipeError, ConnectionResetError):
                return  # the command exited early; its exit code says why
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                process.stdin.close()
                await process.stdin.wait_closed()

        limit = max_output_bytes or DEFAULT_MAX_OUTPUT_BYTES
        held = 0

        async def drain(stream: asyncio.StreamReader) -> bytes:
            nonlocal held
            data = bytearray()
            while chunk := await stream.read(64 * 1024):
                held += len(chunk)
                if held > limit:
                    # End the command, and read (not keep) to the end of its output: the
                    # pipe must reach its end for the process to be reaped.
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(process.pid, signal.SIGKILL)
                    while await stream.read(64 * 1024):
                        pass
                    raise ExecOutputTooLargeError(
                        f"the command wrote more than {limit} bytes of output", limit=limit
                    )
                data += chunk
            return bytes(data)

        async def converse() -> tuple[bytes, bytes]:
            assert process.stdout is not None
            assert process.stderr is not None
            reads = asyncio.gather(
                drain(process.stdout), drain(process.stderr), return_exceptions=True
            )
            try:
                if stdin is not None:
                    await feed()
            except BaseException:
                reads.cancel()
                await asyncio.gather(reads, return_exceptions=True)
                raise
            out, err = await reads
            if isinstance(out, BaseException):
                raise out
            if isinstance(err, BaseException):
                raise err
            await process.wait()
            return out, err

        try:
            out, err = await asyncio.wait_for(converse(), timeout)
        except TimeoutError:
            raise ExecTimeoutError(f"exec in pod {namespace}/{pod} timed out") from None
        finally:
            if process.returncode is None:
                # Like a broken exec stream: the whole command (sh and its children) ends.
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                if process.stdin is not None:
                    process.stdin.close()
                await process.wait()
            self.calls.append(
                ExecCall(namespace, pod, container, tuple(argv), sent, process.returncode)
            )
        assert process.returncode is not None
        return ExecResult(process.returncode, out, err)
