"""Running a command in a pod container: the transport interface, its errors and helpers.

:class:`ExecTransport` is what the operator's exec steps need (the CLI validation, the
SKILL.md of a claimed pod, the user-library sync): run an argv (never a shell string built
from data) with optional stdin, and get the exit code and output back. The real transport,
:class:`~craft_operator.kube.exec_aiohttp.AiohttpExec`, speaks the Kubernetes exec API's
websocket channel protocol on the event loop; :mod:`craft_operator.kube.exec_local` has the
local double used by tests. What is here is shared by both: the result, the errors (each
says whether waiting helps), the exit status message, the HTTP status of a refused
connection, the excerpts of what a pod printed that messages may carry, the stdin source
and its closing, and the clock that finds a call that stalls.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import time
from collections.abc import AsyncGenerator, AsyncIterable, Callable, Iterator, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Protocol

Stdin = bytes | AsyncIterable[bytes] | None

#: The first channel protocol that can close stdin (so ``tar`` sees the end of its input).
V5_CHANNEL_PROTOCOL = "v5.channel.k8s.io"
#: Enough for a command without stdin (API servers before Kubernetes 1.30).
V4_CHANNEL_PROTOCOL = "v4.channel.k8s.io"
STDIN_CHANNEL = 0
STDOUT_CHANNEL = 1
STDERR_CHANNEL = 2
ERROR_CHANNEL = 3
#: v5's message to close one of the client's channels: ``255`` then the channel.
CLOSE_CHANNEL = 255


@dataclass(frozen=True)
class ExecResult:
    """How a command ended: its exit code and everything it wrote."""

    exit_code: int
    stdout: bytes
    stderr: bytes

    def stderr_excerpt(self, limit: int = 500, *, secrets: Sequence[str] = ()) -> str:
        """The end of stderr as one line of plain text, for conditions and events: anything
        like a PAT redacted, and nothing at all if it holds a piece of one of ``secrets``
        (see :func:`one_line`)."""
        return one_line(self.stderr, limit=limit, secrets=secrets)


_TERMINAL_SEQUENCE = re.compile(r"\x1b(\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(\x07|\x1b\\)?|.)")
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")

#: The characters of an Onyx PAT as the operator mints them (``credentials.tokens``: the
#: prefix, an optional URL-quoted tenant and a dot, then URL-safe base64).
_TOKEN_CHARACTERS = "A-Za-z0-9_.%~/-"  # noqa: S105 - a character class, no secret
_PAT = re.compile(f"onyx_pat_[{_TOKEN_CHARACTERS}]*")
_NOT_TOKEN = re.compile(f"[^{_TOKEN_CHARACTERS}]")
REDACTED = "[redacted]"
#: What an excerpt says instead when the output held a piece of a secret it was given.
WITHHELD = "output withheld: it contained the PAT"
#: More characters than any PAT has (its random part is 256, a quoted tenant much less).
LONGEST_TOKEN = 1024
#: The shortest run of a secret's characters that withholds an excerpt where it appears.
SHORTEST_FRAGMENT = 8
#: The end of an output an excerpt is made from, in bytes (or characters): many times the
#: longest excerpt, so that enough is left once escape sequences and blank lines are gone.
#: Nothing before it is looked at, so a pod that prints megabytes costs no more.
EXCERPT_WINDOW = 8 * 1024


def one_line(text: str | bytes, *, limit: int = 500, secrets: Sequence[str] = ()) -> str:
    """The end of ``text`` from a sandbox pod made fit for a status message.

    Only the last :data:`EXCERPT_WINDOW` bytes (or characters) are read (:func:`tail`).
    Terminal escape sequences and control characters are removed, anything like a PAT is
    redacted, lines are joined with "; ", and at most ``limit`` characters are kept (the
    end, where a failure usually says what went wrong). If what is left holds
    :data:`SHORTEST_FRAGMENT` characters in a row of one of ``secrets``, even with other
    characters between them (:func:`holds_piece_of`), the result is :data:`WITHHELD`: the
    agent in a pod controls what its commands print, and may print its token in pieces.
    """
    lines = _TERMINAL_SEQUENCE.sub("", tail(text)).splitlines()
    joined = "; ".join(
        cleaned for line in lines if (cleaned := " ".join(_CONTROL.sub(" ", line).split()))
    )
    # Looked for before anything is redacted: a marker between two pieces would part them.
    if any(holds_piece_of(joined, secret) for secret in secrets):
        return WITHHELD
    # Redacted before the cut, so that no cut leaves a piece of a token too short to see.
    joined = _PAT.sub(REDACTED, joined)
    return joined if len(joined) <= limit else "…" + joined[-limit:]


def tail(text: str | bytes, window: int = EXCERPT_WINDOW) -> str:
    """The last ``window`` bytes (or characters) of ``text``, as text.

    When that cuts something off, what comes before the first character that cannot be part
    of a token is dropped too (at most :data:`LONGEST_TOKEN` characters: a token is no
    longer): the cut may have fallen inside a token, and its end alone (no ``onyx_pat_``
    prefix, maybe a few characters) would not be recognised as one.
    """
    if len(text) <= window:
        return text if isinstance(text, str) else text.decode("utf-8", errors="replace")
    end = text[-window:]
    decoded = end if isinstance(end, str) else end.decode("utf-8", errors="replace")
    boundary = _NOT_TOKEN.search(decoded, 0, LONGEST_TOKEN)
    return decoded[boundary.end() if boundary else LONGEST_TOKEN :]


def holds_piece_of(text: str, secret: str) -> bool:
    """Whether ``text`` holds :data:`SHORTEST_FRAGMENT` characters in a row of ``secret``
    (all of it, if shorter) once every character ``secret`` does not use is removed: a
    token printed in short lines, or with spaces or quotes between its pieces, is found."""
    size = min(SHORTEST_FRAGMENT, len(secret))
    if size == 0:
        return False
    alphabet = set(secret)
    kept = "".join(character for character in text if character in alphabet)
    pieces = {secret[start : start + size] for start in range(len(secret) - size + 1)}
    return any(kept[start : start + size] in pieces for start in range(len(kept) - size + 1))


class ExecError(Exception):
    """The command could not be run or did not finish; ``retryable`` says if waiting helps."""

    retryable = True

    def __init__(self, message: str, *, retryable: bool | None = None) -> None:
        super().__init__(message)
        if retryable is not None:
            self.retryable = retryable

    def unburdened(self) -> ExecError:
        """This error without its traceback and the exceptions it came from. A failed call
        is kept (until the sandbox's next pass, days while it sleeps), and through them it
        kept every frame it passed, and what they held: the output the pod printed."""
        self.__traceback__ = None
        self.__context__ = None
        self.__cause__ = None
        return self


#: A check that a transport runs once its call holds a connection, just before the command
#: starts: what it raises ends the call with nothing run. The caller sets it for the call
#: (:class:`~craft_operator.reconciler.pod_guard.GuardedExec`): a call may wait for a
#: connection, and the pod that the name stood for when it was checked may be gone by then.
BEFORE_START: ContextVar[Callable[[], None] | None] = ContextVar("exec_before_start", default=None)


class ExecUnavailableError(ExecError):
    """The pod or container cannot be reached (not found, not running, API error)."""


class ExecForbiddenError(ExecError):
    """The operator may not exec into the pod (RBAC: ``pods/exec`` create)."""

    retryable = False


class ExecTimeoutError(ExecError):
    """The command did not finish in time; it was abandoned."""


class ExecStalledError(ExecTimeoutError):
    """The call made no progress for the transport's idle timeout (the pod took none of its
    stdin and wrote nothing, or the connection went quiet); it was abandoned."""


class ExecTooSlowError(ExecStalledError):
    """The pod took its stdin slower than the caller's pace (:func:`paced`); abandoned."""


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
        timeout: float | None = None,  # noqa: ASYNC109 - each transport enforces it
        max_output_bytes: int | None = None,
    ) -> ExecResult:
        """Run ``argv`` and wait for it to exit.

        ``stdin`` is sent and then closed. A non-zero exit is a normal :class:`ExecResult`;
        failing to run or finish the command raises :class:`ExecError`. If iterating
        ``stdin`` raises, the command is abandoned and that exception propagates unchanged.
        An async iterator given as ``stdin`` is closed (``aclose``) before this returns,
        however the call ends, so that what it holds open is let go at once.
        ``timeout`` bounds the call, less the time it spends waiting for ``stdin`` to
        yield (a read from S3 is not the pod's time). ``max_output_bytes`` caps stdout and
        stderr together (default: the transport's own cap): a command that writes more is
        abandoned with :class:`ExecOutputTooLargeError`, and no more than about that much of
        its output is ever held. A call that makes no
        progress while its stdin is sent (the pod takes none of it and writes nothing) for
        the transport's idle timeout is abandoned with :class:`ExecStalledError`.

        An abandoned command is not killed (the kubelet does not): its stdin ends, early,
        and it runs on. A command that acts on its stdin must check that all of it came.
        """
        ...


class Progress:
    """When the pod last took some of a call's stdin, to find a pod that stops reading it;
    ``idle`` seconds without a move is a stall (``None``: never).

    Only while stdin is being sent: once all of it is taken (or a call has none), a command
    may work silently (a library upload's moves, onyx-cli waiting for its server) and only
    the call's own timeout bounds it. Output is not a move: a pod that holds its stdin while
    it prints now and then would otherwise hold the call up to its whole timeout. The clock
    also stands still while the call waits for the caller's own stdin source: a slow source
    is not the pod's stall. So does the call's own ``deadline``, if given: a library of
    many small files waits on S3 for longer than the pod ever takes.
    """

    def __init__(self, idle: float | None, deadline: asyncio.Timeout | None = None) -> None:
        self.idle = idle
        self._deadline = deadline
        self._last = time.monotonic()
        self._sourcing = False
        self._sent = False

    def sent_all(self) -> None:
        """All of stdin is taken: the call can no longer stall."""
        self._sent = True

    def moved(self) -> None:
        """The pod took some of the call's stdin now."""
        self._last = time.monotonic()

    @contextlib.contextmanager
    def sourcing(self) -> Iterator[None]:
        """While the block waits for the stdin source, the call cannot stall."""
        self._sourcing = True
        left = self._pause_deadline()
        try:
            yield
        finally:
            self._sourcing = False
            self._resume_deadline(left)
            self.moved()

    def _pause_deadline(self) -> float | None:
        """Stop the deadline's clock; the seconds it had left (``None``: nothing to resume)."""
        deadline = self._deadline
        if deadline is None or deadline.expired() or (when := deadline.when()) is None:
            return None
        loop = asyncio.get_running_loop()
        with contextlib.suppress(RuntimeError):  # the call is already over
            deadline.reschedule(None)
            return max(0.0, when - loop.time())
        return None

    def _resume_deadline(self, left: float | None) -> None:
        """Start the deadline's clock again with ``left`` seconds to run."""
        deadline = self._deadline
        if deadline is None or left is None or deadline.expired():
            return
        with contextlib.suppress(RuntimeError):  # the call is already over
            deadline.reschedule(asyncio.get_running_loop().time() + left)

    def left(self) -> float | None:
        """Seconds until the call counts as stalled (at least 0), or ``None`` if it never does."""
        if self.idle is None or self._sent:
            return None
        if self._sourcing:
            return self.idle
        return max(0.0, self._last + self.idle - time.monotonic())

    def stalled(self) -> bool:
        """Whether the call made no progress for ``idle`` seconds."""
        return self.left() == 0.0

    def stalled_error(self, where: str) -> ExecStalledError:
        """The error that abandons a stalled call into pod ``where``."""
        return ExecStalledError(
            f"exec in pod {where} made no progress for {self.idle or 0:.0f}s "
            "(none of its stdin taken)"
        )


async def stdin_chunks(stdin: Stdin) -> AsyncGenerator[bytes, None]:
    """Iterate any accepted ``stdin`` value as chunks; the iterator taken from an async
    iterable is closed when this generator is, however it ends."""
    if stdin is None:
        return
    if isinstance(stdin, bytes):
        if stdin:
            yield stdin
        return
    source = aiter(stdin)
    try:
        async for chunk in source:
            if chunk:
                yield chunk
    finally:
        await close_stdin(source)


async def paced(
    stdin: AsyncIterable[bytes], *, grace: float, bytes_per_second: float, where: str
) -> AsyncGenerator[bytes, None]:
    """``stdin`` for a pod that must take it at ``bytes_per_second`` after ``grace`` seconds.

    The pod's time is the time between handing a chunk over and being asked for the next
    (the transport sending it); the source's own time (a read from S3) is not counted. Once
    the pod's time passes ``grace`` plus what it took divided by the pace, the stream stops
    with :class:`ExecTooSlowError`, which the transport passes on unchanged. The transport's
    idle timeout still ends a pod that takes nothing at all: this bounds one that takes a
    little now and then, which would otherwise hold the call up to its whole timeout.
    """
    taken = 0
    pod_time = 0.0
    source = aiter(stdin)
    try:
        async for chunk in source:
            handed = time.monotonic()
            yield chunk
            pod_time += time.monotonic() - handed
            taken += len(chunk)
            if pod_time > grace + taken / bytes_per_second:
                raise ExecTooSlowError(
                    f"exec in pod {where} took {taken} bytes of its stdin in {pod_time:.0f}s, "
                    f"slower than {bytes_per_second:.0f} bytes/s after the first {grace:g}s"
                )
    finally:
        await close_stdin(source)


async def close_stdin(stdin: object) -> None:
    """Close ``stdin`` if it can be closed (an async generator, or any object with
    ``aclose``), as :meth:`ExecTransport.run` does before it returns; closing twice is
    harmless. A source still running in a task being cancelled is left to that task."""
    aclose = getattr(stdin, "aclose", None)
    if aclose is None:
        return
    with contextlib.suppress(RuntimeError):
        await aclose()


#: The most of a status message (the error channel) read; the API server's is a few
#: hundred bytes.
STATUS_MAX_BYTES = 64 * 1024
#: The most of its message that reaches a condition or an event.
STATUS_MESSAGE_LIMIT = 300
#: A code as a ``NonZeroExitCode`` cause gives it: ASCII digits only.
_EXIT_CODE = re.compile(r"[0-9]{1,10}")
#: Failures that running the command again cannot mend: the runtime could not start the
#: program itself (``exec: "tar": executable file not found in $PATH``, ``exec: "/x": stat
#: /x: no such file or directory``, ``exec: "/x": permission denied``). Anchored to the
#: program: the same words elsewhere (a volume's file renamed under the kubelet, a
#: runtime's own state file) are passing troubles, retried.
_PERMANENT_FAILURE = re.compile(
    r'exec: "[^"]*": (?:executable file not found|(?:stat [^:]*: )?no such file or directory'
    r"|permission denied)",
    re.IGNORECASE,
)


def parse_exec_status(raw: bytes) -> int:
    """The exit code from the exec API's status message (the error channel).

    ``Success`` is 0; ``NonZeroExitCode`` carries the code. Any other failure raises
    :class:`ExecError` with the server's message made one short plain line: retryable
    (with backoff) unless it says the command is missing from the image or cannot be
    executed. So does a status that is not what the API server sends (not JSON, not an
    object, fields of the wrong type, nested too deep): nothing else ever escapes.
    """
    if not raw.strip():
        raise ExecUnavailableError("the exec stream ended without an exit status")
    status = _status_object(raw)
    if status.get("status") == "Success":
        return 0
    if status.get("reason") == "NonZeroExitCode":
        code = _exit_code(status.get("details"))
        if code is not None:
            return code
    raise _status_failure(status)


def _status_object(raw: bytes) -> dict[str, Any]:
    """The status message as a JSON object, or an :class:`ExecError` saying it is unreadable."""
    unreadable = ExecError("the exec stream sent an unreadable exit status")
    if len(raw) > STATUS_MAX_BYTES:
        raise unreadable
    try:
        status = json.loads(raw)
    except (ValueError, RecursionError):  # RecursionError: nested too deep
        raise unreadable from None
    if not isinstance(status, dict):
        raise unreadable
    return status


def _exit_code(details: object) -> int | None:
    """The non-zero exit code in a ``NonZeroExitCode`` status's ``details``, if it has one."""
    causes = details.get("causes") if isinstance(details, dict) else None
    for cause in causes if isinstance(causes, list) else []:
        if not isinstance(cause, dict) or cause.get("reason") != "ExitCode":
            continue
        message = cause.get("message")
        if isinstance(message, str) and _EXIT_CODE.fullmatch(message) and int(message):
            return int(message)
    return None


def _status_failure(status: dict[str, Any]) -> ExecError:
    """The :class:`ExecError` for a failed status: its message in one short plain line
    (redacted), retryable unless the whole message names a permanent cause."""
    message = status.get("message")
    text = message if isinstance(message, str) else ""
    said = one_line(text, limit=STATUS_MESSAGE_LIMIT) or "unknown failure"
    return ExecError(
        f"the command could not be run: {said}",
        retryable=_PERMANENT_FAILURE.search(text) is None,
    )


def classify_handshake(status: int, reason: str, *, namespace: str, pod: str) -> ExecError:
    """The :class:`ExecError` for an exec connection the API server refused with HTTP
    ``status`` (``reason`` is the status line's phrase).

    The message names the pod and the status only: never the request's URL (it carries the
    argv), headers (they change on every retry) or credentials.
    """
    where = f"pod {namespace}/{pod}"
    if status == 403:
        return ExecForbiddenError(f"not allowed to exec into {where} (needs pods/exec create)")
    if status == 404:
        return ExecUnavailableError(f"{where} was not found")
    if status == 400:
        return ExecUnavailableError(f"{where} cannot run commands now (not running?)")
    if status == 401:
        return ExecUnavailableError(
            f"cannot exec into {where}: the API server refused our credentials (HTTP 401); "
            "they are read again"
        )
    said = one_line(reason, limit=100)
    return ExecUnavailableError(
        f"cannot exec into {where}: HTTP {status}{' ' + said if said else ''}"
    )
