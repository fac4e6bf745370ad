"""A local stand-in for pod exec: runs the same argv on this machine.

Used by the user-library tests, the integration tests and the reconciler's tests in place
of :class:`~craft_operator.kube.exec_aiohttp.AiohttpExec`. Every argument that is
``/workspace`` or starts with ``/workspace/`` is rewritten to the pod's own directory under ``root``
(``<root>/<namespace>/<pod>/workspace``), and likewise ``/run/onyx`` (the delivered PAT's
volume) to ``<root>/<namespace>/<pod>/run/onyx``, so scripts written for the sandbox image
run unchanged against a temporary directory with the real ``sh`` and ``tar``.
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
#: The memory-backed volume the PAT is delivered into (see builders/pod.py).
CREDENTIALS_DIR = "/run/onyx"
#: The output cap when a call names none (as the real transport's).
DEFAULT_MAX_OUTPUT_BYTES = 64 * 1024 * 1024


class _Conversation:
    """Feeding one local process its stdin and reading its output, within the output cap.

    ``sent`` counts the stdin bytes written; ``held`` the output bytes read, of both streams
    together, which may not exceed ``limit``.
    """

    def __init__(self, process: asyncio.subprocess.Process, stdin: Stdin, limit: int) -> None:
        self.process = process
        self.stdin = stdin
        self.limit = limit
        self.sent = 0
        self.held = 0

    async def feed(self) -> None:
        """Write all of stdin, then close it; stop quietly if the command stopped reading."""
        pipe = self.process.stdin
        assert pipe is not None
        try:
            async for chunk in _chunks(self.stdin):
                pipe.write(chunk)
                self.sent += len(chunk)
                await pipe.drain()
        except (BrokenPipeError, ConnectionResetError):
            return  # the command exited early; its exit code says why
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            pipe.close()
            await pipe.wait_closed()

    async def drain(self, stream: asyncio.StreamReader) -> bytes:
        """All of ``stream``; :class:`ExecOutputTooLargeError` (the command killed) past the cap."""
        data = bytearray()
        while chunk := await stream.read(64 * 1024):
            self.held += len(chunk)
            if self.held > self.limit:
                # End the command, and read (not keep) to the end of its output: the
                # pipe must reach its end for the process to be reaped.
                self.kill()
                while await stream.read(64 * 1024):
                    pass
                raise ExecOutputTooLargeError(
                    f"the command wrote more than {self.limit} bytes of output", limit=self.limit
                )
            data += chunk
        return bytes(data)

    async def converse(self) -> tuple[bytes, bytes]:
        """Feed stdin while reading stdout and stderr; both outputs once the command exits."""
        process = self.process
        assert process.stdout is not None
        assert process.stderr is not None
        reads = asyncio.gather(
            self.drain(process.stdout), self.drain(process.stderr), return_exceptions=True
        )
        try:
            if self.stdin is not None:
                await self.feed()
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

    def kill(self) -> None:
        """SIGKILL the command's whole process group (sh and its children)."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)

    async def end(self) -> None:
        """Like a broken exec stream: a command still running ends, and is reaped."""
        if self.process.returncode is None:
            self.kill()
            if self.process.stdin is not None:
                self.process.stdin.close()
            await self.process.wait()


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

    def credentials_dir(self, namespace: str, pod: str) -> Path:
        """The local directory that stands for ``/run/onyx`` in that pod."""
        return self.root / namespace / pod / "run" / "onyx"

    def _map(self, namespace: str, pod: str, arg: str) -> str:
        if arg == WORKSPACE or arg.startswith(WORKSPACE + "/"):
            return str(self.workspace(namespace, pod)) + arg[len(WORKSPACE) :]
        if arg == CREDENTIALS_DIR or arg.startswith(CREDENTIALS_DIR + "/"):
            self.credentials_dir(namespace, pod).mkdir(parents=True, exist_ok=True)
            return str(self.credentials_dir(namespace, pod)) + arg[len(CREDENTIALS_DIR) :]
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
        process = await self._spawn(namespace, pod, argv, piped_stdin=stdin is not None)
        talk = _Conversation(process, stdin, max_output_bytes or DEFAULT_MAX_OUTPUT_BYTES)
        try:
            out, err = await asyncio.wait_for(talk.converse(), timeout)
        except TimeoutError:
            raise ExecTimeoutError(f"exec in pod {namespace}/{pod} timed out") from None
        finally:
            await talk.end()
            self.calls.append(
                ExecCall(namespace, pod, container, tuple(argv), talk.sent, process.returncode)
            )
        assert process.returncode is not None
        return ExecResult(process.returncode, out, err)

    async def _spawn(
        self, namespace: str, pod: str, argv: Sequence[str], *, piped_stdin: bool
    ) -> asyncio.subprocess.Process:
        """Start ``argv`` with ``/workspace`` mapped to the pod's directory, in its own session."""
        self.workspace(namespace, pod).mkdir(parents=True, exist_ok=True)
        local = [self._map(namespace, pod, arg) for arg in argv]
        local[0] = shutil.which(local[0], path=self.path) or local[0]
        return await asyncio.create_subprocess_exec(
            *local,
            stdin=asyncio.subprocess.PIPE if piped_stdin else asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env={"PATH": self.path, "LC_ALL": "C.UTF-8"},
            start_new_session=True,
        )
