"""Running a command in a pod container: the transport interface and the real one.

:class:`ExecTransport` is what the user-library sync needs: run an argv (never a shell
string built from data) with optional stdin, and get the exit code and output back.
:class:`KubernetesExec` implements it over the Kubernetes exec API with the ``kubernetes``
client's websocket support and channel protocol ``v5.channel.k8s.io``, the first version
that can close stdin (so ``tar`` sees the end of its input). The client is blocking, so each
call runs in a worker thread; stdin chunks are pulled from the event loop as the websocket
accepts them. :mod:`craft_operator.kube.exec_local` has the local double used by tests.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import threading
import time
from collections.abc import AsyncGenerator, AsyncIterable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Protocol

Stdin = bytes | AsyncIterable[bytes] | None

V5_CHANNEL_PROTOCOL = "v5.channel.k8s.io"
STDIN_CHANNEL = 0
STDOUT_CHANNEL = 1
STDERR_CHANNEL = 2
ERROR_CHANNEL = 3


@dataclass(frozen=True)
class ExecResult:
    """How a command ended: its exit code and everything it wrote."""

    exit_code: int
    stdout: bytes
    stderr: bytes

    def stderr_excerpt(self, limit: int = 500) -> str:
        """The end of stderr as one line of plain text, for conditions and events."""
        return one_line(self.stderr.decode("utf-8", errors="replace"), limit=limit)


_TERMINAL_SEQUENCE = re.compile(r"\x1b(\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(\x07|\x1b\\)?|.)")
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def one_line(text: str, *, limit: int = 500) -> str:
    """``text`` from a sandbox pod made fit for a status message: terminal escape sequences
    and control characters removed, lines joined with "; ", and at most ``limit``
    characters (its end, where a failure usually says what went wrong)."""
    lines = _TERMINAL_SEQUENCE.sub("", text).splitlines()
    joined = "; ".join(
        cleaned for line in lines if (cleaned := " ".join(_CONTROL.sub(" ", line).split()))
    )
    return joined if len(joined) <= limit else "…" + joined[-limit:]


class ExecError(Exception):
    """The command could not be run or did not finish; ``retryable`` says if waiting helps."""

    retryable = True

    def __init__(self, message: str, *, retryable: bool | None = None) -> None:
        super().__init__(message)
        if retryable is not None:
            self.retryable = retryable


class ExecUnavailableError(ExecError):
    """The pod or container cannot be reached (not found, not running, API error)."""


class ExecForbiddenError(ExecError):
    """The operator may not exec into the pod (RBAC: ``pods/exec`` create)."""

    retryable = False


class ExecTimeoutError(ExecError):
    """The command did not finish in time; it was abandoned."""


class ExecOutputTooLargeError(ExecError):
    """The command wrote more than the caller would read; it was abandoned.

    Waiting does not help: the same command in the same pod writes as much again.
    """

    retryable = False

    def __init__(self, message: str, *, limit: int) -> None:
        super().__init__(message)
        self.limit = limit


class ExecProtocolError(ExecError):
    """The API server cannot do what we need (no v5 channel protocol to close stdin)."""

    retryable = False


class ExecTransport(Protocol):
    """Runs a command in a container of a pod."""

    async def run(
        self,
        namespace: str,
        pod: str,
        container: str,
        argv: Sequence[str],
        *,
        stdin: Stdin = None,
        timeout: float | None = None,  # noqa: ASYNC109 - enforced in the worker thread
        max_output_bytes: int | None = None,
    ) -> ExecResult:
        """Run ``argv`` and wait for it to exit.

        ``stdin`` is sent and then closed. A non-zero exit is a normal :class:`ExecResult`;
        failing to run or finish the command raises :class:`ExecError`. If iterating
        ``stdin`` raises, the command is abandoned and that exception propagates unchanged.
        ``max_output_bytes`` caps stdout and stderr together (default: the transport's own
        cap): a command that writes more is abandoned with :class:`ExecOutputTooLargeError`,
        and no more than about that much of its output is ever held.
        """
        ...


async def stdin_chunks(stdin: Stdin) -> AsyncGenerator[bytes, None]:
    """Iterate any accepted ``stdin`` value as chunks."""
    if stdin is None:
        return
    if isinstance(stdin, bytes):
        if stdin:
            yield stdin
        return
    async for chunk in stdin:
        if chunk:
            yield chunk


def parse_exec_status(raw: bytes) -> int:
    """The exit code from the exec API's status message (the error channel).

    ``Success`` is 0; ``NonZeroExitCode`` carries the code; any other failure (for example
    "executable file not found") raises :class:`ExecError` with the server's message.
    """
    if not raw.strip():
        raise ExecUnavailableError("the exec stream ended without an exit status")
    try:
        status: dict[str, Any] = json.loads(raw)
    except ValueError:
        raise ExecError("the exec stream sent an unreadable exit status") from None
    if status.get("status") == "Success":
        return 0
    details = status.get("details") or {}
    if status.get("reason") == "NonZeroExitCode":
        for cause in details.get("causes") or []:
            if cause.get("reason") == "ExitCode":
                try:
                    return int(cause.get("message", ""))
                except ValueError:
                    break
    message = str(status.get("message") or "unknown failure")
    raise ExecError(f"the command could not be run: {message}", retryable=False)


_HANDSHAKE = re.compile(r"Handshake status (\d{3})")


def classify_open_error(text: str, *, namespace: str, pod: str) -> ExecError:
    """The :class:`ExecError` for a failed exec connection, from the client's message."""
    match = _HANDSHAKE.search(text)
    status = int(match.group(1)) if match else 0
    where = f"pod {namespace}/{pod}"
    if status == 403:
        return ExecForbiddenError(f"not allowed to exec into {where} (needs pods/exec create)")
    if status == 404:
        return ExecUnavailableError(f"{where} was not found")
    if status == 400:
        return ExecUnavailableError(f"{where} cannot run commands now (not running?)")
    # websocket-client's text is "Handshake status N Reason -+-+- {headers} -+-+- body": the
    # headers carry the date, so a message built from them would change on every retry.
    parts = text.split(" -+-+- ")
    detail = parts[0]
    body = parts[-1] if len(parts) > 2 else ""
    said = re.search(r'"message"\s*:\s*"((?:[^"\\]|\\.)*)"', body)
    if said:
        detail += f": {said.group(1)}"
    return ExecUnavailableError(
        f"cannot exec into {where}: {one_line(detail, limit=300) or 'connection failed'}"
    )


class _Output:
    """Collects stdout and stderr up to a limit (the pod is not trusted to be brief)."""

    def __init__(self, limit: int) -> None:
        self.stdout = bytearray()
        self.stderr = bytearray()
        self.limit = limit

    def take(self, ws: Any) -> None:
        for channel, buffer in ((STDOUT_CHANNEL, self.stdout), (STDERR_CHANNEL, self.stderr)):
            data = ws.read_channel(channel, timeout=0)
            if data:
                buffer.extend(data)
        if len(self.stdout) + len(self.stderr) > self.limit:
            raise ExecOutputTooLargeError(
                f"the command wrote more than {self.limit} bytes of output", limit=self.limit
            )


class KubernetesExec:
    """:class:`ExecTransport` over the Kubernetes exec API (websocket, v5 channels)."""

    def __init__(
        self,
        api_client: Any,
        *,
        frame_bytes: int = 32 * 1024,
        max_output_bytes: int = 64 * 1024 * 1024,
        max_concurrent_calls: int = 64,
    ) -> None:
        """Use ``api_client`` (a ``kubernetes.client.ApiClient``) for every call.

        Calls block a thread each for as long as they run, in a pool of their own: in the
        event loop's default pool they could take every thread while they wait for stdin
        that is produced with that same pool (S3 reads, database calls), and deadlock.
        """
        self._api_client = api_client
        self._executor = ThreadPoolExecutor(
            max_workers=max_concurrent_calls, thread_name_prefix="craft-exec"
        )
        self._frame_bytes = frame_bytes
        self._max_output_bytes = max_output_bytes

    @classmethod
    def from_environment(cls) -> KubernetesExec:
        """Credentials of the in-cluster service account, else the current kubeconfig."""
        from kubernetes import client, config

        configuration = client.Configuration()
        try:
            config.load_incluster_config(client_configuration=configuration)
        except config.ConfigException:
            config.load_kube_config(client_configuration=configuration)
        return cls(client.ApiClient(configuration))

    async def run(
        self,
        namespace: str,
        pod: str,
        container: str,
        argv: Sequence[str],
        *,
        stdin: Stdin = None,
        timeout: float | None = None,  # noqa: ASYNC109 - enforced in the worker thread
        max_output_bytes: int | None = None,
    ) -> ExecResult:
        """Run ``argv`` in the container; see :meth:`ExecTransport.run`."""
        loop = asyncio.get_running_loop()
        chunks = stdin_chunks(stdin)
        stop = threading.Event()
        deadline = time.monotonic() + timeout if timeout is not None else None

        async def next_chunk() -> bytes | None:
            return await anext(chunks, None)

        def pull(wait: float | None) -> bytes | None:
            future = asyncio.run_coroutine_threadsafe(next_chunk(), loop)
            try:
                return future.result(wait)
            except TimeoutError:
                future.cancel()
                raise ExecTimeoutError(
                    f"exec in pod {namespace}/{pod} timed out waiting for input"
                ) from None

        try:
            return await loop.run_in_executor(
                self._executor,
                self._run_blocking,
                namespace,
                pod,
                container,
                list(argv),
                pull if stdin is not None else None,
                deadline,
                stop,
                min(max_output_bytes or self._max_output_bytes, self._max_output_bytes),
            )
        finally:
            stop.set()
            with contextlib.suppress(RuntimeError):  # still running if we were cancelled
                await chunks.aclose()

    def _open(self, namespace: str, pod: str, container: str, argv: list[str], stdin: bool) -> Any:
        from kubernetes.client import CoreV1Api
        from kubernetes.client.rest import ApiException
        from kubernetes.stream import stream

        try:
            return stream(
                CoreV1Api(self._api_client).connect_get_namespaced_pod_exec,
                pod,
                namespace,
                command=argv,
                container=container,
                stdin=stdin,
                stdout=True,
                stderr=True,
                tty=False,
                binary=True,
                _preload_content=False,
            )
        except Exception as exc:
            # kubernetes 36 turns a failed handshake into ApiException(status=0) and then, in
            # ApiClient, trips over its empty body (AttributeError): look for it in the chain.
            cause: BaseException | None = exc
            while cause is not None and not isinstance(cause, ApiException):
                cause = cause.__context__
            text = str(cause.reason) if isinstance(cause, ApiException) else str(exc)
            raise classify_open_error(text, namespace=namespace, pod=pod) from None

    def _run_blocking(
        self,
        namespace: str,
        pod: str,
        container: str,
        argv: list[str],
        pull: Callable[[float | None], bytes | None] | None,
        deadline: float | None,
        stop: threading.Event,
        max_output_bytes: int,
    ) -> ExecResult:
        from websocket import WebSocketException, WebSocketTimeoutException

        def remaining() -> float | None:
            if stop.is_set():
                raise ExecError("exec abandoned")
            if deadline is None:
                return None
            left = deadline - time.monotonic()
            if left <= 0:
                raise ExecTimeoutError(f"exec in pod {namespace}/{pod} timed out")
            return left

        ws = self._open(namespace, pod, container, argv, stdin=pull is not None)
        output = _Output(max_output_bytes)
        try:
            if pull is not None:
                if ws.subprotocol != V5_CHANNEL_PROTOCOL:
                    raise ExecProtocolError(
                        f"the API server spoke {ws.subprotocol or 'an old protocol'}, not "
                        f"{V5_CHANNEL_PROTOCOL}; stdin cannot be closed (Kubernetes >= 1.30 needed)"
                    )
                self._send_stdin(ws, pull, remaining, output)
            while ws.is_open():
                left = remaining()
                ws.update(timeout=1.0 if left is None else min(left, 1.0))
                output.take(ws)
            output.take(ws)
            code = parse_exec_status(ws.read_channel(ERROR_CHANNEL) or b"")
            return ExecResult(code, bytes(output.stdout), bytes(output.stderr))
        except (WebSocketTimeoutException, TimeoutError):
            # A send that the pod never drains (it does not read its stdin, or it is stopped).
            raise ExecTimeoutError(f"exec in pod {namespace}/{pod} timed out") from None
        except (WebSocketException, OSError) as exc:
            raise ExecUnavailableError(
                f"the exec connection to pod {namespace}/{pod} broke: {exc}"
            ) from None
        finally:
            ws.close()

    def _send_stdin(
        self,
        ws: Any,
        pull: Callable[[float | None], bytes | None],
        remaining: Callable[[], float | None],
        output: _Output,
    ) -> None:
        from websocket import WebSocketConnectionClosedException

        while True:
            chunk = pull(remaining())
            if chunk is None:
                break
            for start in range(0, len(chunk), self._frame_bytes):
                left = remaining()
                ws.sock.settimeout(left)
                try:
                    ws.write_stdin(chunk[start : start + self._frame_bytes])
                except (WebSocketConnectionClosedException, BrokenPipeError):
                    return  # the command exited early; its status says why
                output.take(ws)
        ws.close_channel(STDIN_CHANNEL)
