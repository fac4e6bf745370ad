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
    ExecError,
    ExecOutputTooLargeError,
    ExecResult,
    ExecTimeoutError,
    ExecUnavailableError,
    Progress,
    Stdin,
    close_stdin,
)
from craft_operator.kube.exec import stdin_chunks as _chunks

WORKSPACE = "/workspace"
#: The memory-backed volume the PAT is delivered into (see builders/pod.py).
CREDENTIALS_DIR = "/run/onyx"
#: The output cap when a call names none (as the real transport's).
DEFAULT_MAX_OUTPUT_BYTES = 64 * 1024 * 1024
#: Seconds a call may go without progress by default (as the real transport's).
DEFAULT_IDLE_TIMEOUT = 60.0
#: Seconds an abandoned command may run on before it is killed (the kubelet lets it run).
DEFAULT_ABANDON_GRACE = 5.0
_READ_BYTES = 64 * 1024


class _Conversation:
    """Feeding one local process its stdin and reading its output, within the output cap.

    ``sent`` counts the stdin bytes the pipe took; ``held`` the output bytes read, of both streams
    together, which may not exceed ``limit``; ``progress`` is told of each move.
    """

    def __init__(
        self, process: asyncio.subprocess.Process, stdin: Stdin, limit: int, progress: Progress
    ) -> None:
        self.process = process
        self.stdin = stdin
        self.limit = limit
        self.progress = progress
        self.sent = 0
        self.held = 0

    async def feed(self) -> None:
        """Write all of stdin, then close it; stop quietly if the command stopped reading."""
        pipe = self.process.stdin
        assert pipe is not None
        written = 0
        async with contextlib.aclosing(_chunks(self.stdin)) as chunks:
            try:
                while True:
                    with self.progress.sourcing():
                        chunk = await anext(chunks, None)
                    if chunk is None:
                        break
                    pipe.write(chunk)
                    written += len(chunk)
                    await pipe.drain()
                    if pipe.transport.is_closing():
                        # The command closed its stdin, maybe before this write, which the
                        # transport then dropped without a word: only what came before
                        # surely reached it.
                        return
                    # What left this process: bytes still in its buffer when the command
                    # exits were never sent (how many depends on timing alone).
                    self.sent = written - pipe.transport.get_write_buffer_size()
                    self.progress.moved()
            except (BrokenPipeError, ConnectionResetError):
                return  # the command exited early; its exit code says why
        try:
            pipe.close()
            await pipe.wait_closed()
        except (BrokenPipeError, ConnectionResetError):
            pass
        else:
            self.sent = written  # closing flushed the rest into the pipe
        self.progress.sent_all()

    async def drain(self, stream: asyncio.StreamReader) -> bytes:
        """All of ``stream``; :class:`ExecOutputTooLargeError` (the command killed) past the cap."""
        data = bytearray()
        while chunk := await stream.read(_READ_BYTES):
            self.held += len(chunk)
            if self.held > self.limit:
                # End the command (the next write to an output nobody reads fails), and
                # read (not keep) to the end of its output: the pipe must reach its end for
                # the process to be reaped.
                self.kill()
                await _discard(stream)
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

    async def watched(self, where: str) -> tuple[bytes, bytes]:
        """:meth:`converse`, abandoned with :class:`ExecStalledError` once it stops moving."""
        talk = asyncio.ensure_future(self.converse())
        try:
            while True:
                done, _ = await asyncio.wait({talk}, timeout=self.progress.left())
                if done:
                    return talk.result()
                if self.progress.stalled():
                    raise self.progress.stalled_error(where)
        finally:
            if not talk.done():
                talk.cancel()
                await asyncio.wait({talk})
            if not talk.cancelled():
                talk.exception()  # retrieved: raised above, or superseded

    def kill(self) -> None:
        """SIGKILL the command's whole process group (sh and its children)."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)

    async def linger(self, grace: float) -> None:
        """The caller went away: as the kubelet does, close the command's stdin and let it
        run on (its output read and dropped); one still running after ``grace`` seconds is
        killed, so that no test leaves processes behind."""
        process = self.process
        if process.stdin is not None:
            process.stdin.close()
        streams = [stream for stream in (process.stdout, process.stderr) if stream is not None]
        readers = [asyncio.ensure_future(_discard(stream)) for stream in streams]
        try:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(grace):
                    await process.wait()
        finally:
            if process.returncode is None:
                self.kill()
            await asyncio.gather(*readers, return_exceptions=True)
            await process.wait()


async def _discard(stream: asyncio.StreamReader) -> None:
    """Read ``stream`` to its end, keeping nothing."""
    with contextlib.suppress(ConnectionError):
        while await stream.read(_READ_BYTES):
            pass


@dataclass(frozen=True)
class ExecCall:
    """One recorded call: where it ran, its argv as sent, how many stdin bytes it got, and
    its exit code (``None``: the call was abandoned while the command ran on)."""

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
    ``idle_timeout`` is as the real transport's. A command whose call is abandoned (timed
    out, stalled, its stdin source failed, cancelled) is not killed at once: like the
    kubelet, its stdin is closed and it runs on, for ``abandon_grace`` seconds at most
    (:meth:`settled` waits for such commands).
    """

    root: Path
    calls: list[ExecCall] = field(default_factory=list)
    missing_pods: set[str] = field(default_factory=set)
    path: str = field(default_factory=lambda: os.environ.get("PATH", "/usr/bin:/bin"))
    idle_timeout: float | None = DEFAULT_IDLE_TIMEOUT
    abandon_grace: float = DEFAULT_ABANDON_GRACE
    _lingering: set[asyncio.Task[None]] = field(default_factory=set, init=False, repr=False)

    def workspace(self, namespace: str, pod: str) -> Path:
        """The local directory that stands for ``/workspace`` in that pod."""
        return self.root / namespace / pod / "workspace"

    def credentials_dir(self, namespace: str, pod: str) -> Path:
        """The local directory that stands for ``/run/onyx`` in that pod."""
        return self.root / namespace / pod / "run" / "onyx"

    async def settled(self) -> None:
        """Wait until every command whose call was abandoned has ended."""
        while self._lingering:
            await asyncio.gather(*self._lingering, return_exceptions=True)

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
        try:
            if f"{namespace}/{pod}" in self.missing_pods:
                raise ExecUnavailableError(f"pod {namespace}/{pod} was not found")
            if not argv:
                raise ValueError("argv must not be empty")
            process = await self._spawn(namespace, pod, argv, piped_stdin=stdin is not None)
        except BaseException:
            await close_stdin(stdin)
            raise
        limit = max_output_bytes or DEFAULT_MAX_OUTPUT_BYTES
        deadline = asyncio.timeout(timeout)
        talk = _Conversation(
            process,
            stdin,
            limit,
            Progress(self.idle_timeout if stdin is not None else None, deadline),
        )
        try:
            async with deadline:
                out, err = await talk.watched(f"{namespace}/{pod}")
        except TimeoutError:
            if not deadline.expired():
                raise  # the stdin source's own
            raise ExecTimeoutError(f"exec in pod {namespace}/{pod} timed out") from None
        finally:
            await close_stdin(stdin)
            if process.returncode is None:
                self._let_run_on(talk)
            self.calls.append(
                ExecCall(namespace, pod, container, tuple(argv), talk.sent, process.returncode)
            )
        assert process.returncode is not None
        return ExecResult(process.returncode, out, err)

    def _let_run_on(self, talk: _Conversation) -> None:
        """Leave an abandoned command to :meth:`_Conversation.linger`, in a task of its own."""
        task = asyncio.get_running_loop().create_task(talk.linger(self.abandon_grace))
        self._lingering.add(task)
        task.add_done_callback(self._lingering.discard)

    async def _spawn(
        self, namespace: str, pod: str, argv: Sequence[str], *, piped_stdin: bool
    ) -> asyncio.subprocess.Process:
        """Start ``argv`` with ``/workspace`` mapped to the pod's directory, in its own
        session; a program that cannot be started is an :class:`ExecError`, as the exec
        API reports it (not retryable when it is missing or not executable)."""
        self.workspace(namespace, pod).mkdir(parents=True, exist_ok=True)
        local = [self._map(namespace, pod, arg) for arg in argv]
        local[0] = shutil.which(local[0], path=self.path) or local[0]
        try:
            return await asyncio.create_subprocess_exec(
                *local,
                stdin=asyncio.subprocess.PIPE if piped_stdin else asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                env={"PATH": self.path, "LC_ALL": "C.UTF-8"},
                start_new_session=True,
            )
        except OSError as exc:
            raise _not_started(argv[0], exc) from None


def _not_started(program: str, exc: OSError) -> ExecError:
    """What the exec API says of a program that could not be started: missing or not
    executable is permanent (the image lacks it), anything else may pass."""
    if isinstance(exc, FileNotFoundError):
        return ExecError(
            f'the command could not be run: exec: "{program}": executable file not found in $PATH',
            retryable=False,
        )
    said = (exc.strerror or type(exc).__name__).lower()
    permanent = isinstance(exc, PermissionError | NotADirectoryError)
    return ExecError(
        f'the command could not be run: exec: "{program}": {said}', retryable=not permanent
    )
