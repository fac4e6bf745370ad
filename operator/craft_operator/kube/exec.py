"""Running a command in a pod container: the transport interface, its errors and helpers.

:class:`ExecTransport` is what the operator's exec steps need (the CLI validation, the
SKILL.md of a claimed pod, the user-library sync): run an argv (never a shell string built
from data) with optional stdin, and get the exit code and output back. The real transport,
:class:`~craft_operator.kube.exec_aiohttp.AiohttpExec`, speaks the Kubernetes exec API's
websocket channel protocol on the event loop; :mod:`craft_operator.kube.exec_local` has the
local double used by tests. What is here is pure: the result, the errors (each says whether
waiting helps), the exit status message and the HTTP status of a refused connection.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncGenerator, AsyncIterable, Sequence
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
        """The end of stderr as one line of plain text, for conditions and events, with
        anything like a PAT and any fragment of ``secrets`` redacted."""
        return one_line(self.stderr.decode("utf-8", errors="replace"), limit=limit, secrets=secrets)


_TERMINAL_SEQUENCE = re.compile(r"\x1b(\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(\x07|\x1b\\)?|.)")
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


#: An Onyx PAT as the operator mints them (``credentials.tokens``: the prefix, an optional
#: quoted tenant and a dot, then URL-safe base64).
_PAT = re.compile(r"onyx_pat_[A-Za-z0-9_.%~-]*")
REDACTED = "[redacted]"
#: The shortest run of a secret's characters that is redacted where it appears alone.
SHORTEST_FRAGMENT = 8


def one_line(text: str, *, limit: int = 500, secrets: Sequence[str] = ()) -> str:
    """``text`` from a sandbox pod made fit for a status message: terminal escape sequences
    and control characters removed, anything like a PAT and any run of at least
    :data:`SHORTEST_FRAGMENT` characters of ``secrets`` redacted, lines joined with "; ",
    and at most ``limit`` characters (its end, where a failure usually says what went
    wrong). The agent in a pod controls what its commands print: it may print its token."""
    lines = _TERMINAL_SEQUENCE.sub("", text).splitlines()
    joined = "; ".join(
        cleaned for line in lines if (cleaned := " ".join(_CONTROL.sub(" ", line).split()))
    )
    # Redacted before the cut, so that no cut leaves a piece of a token too short to see;
    # the fragments are looked for near the end only (the output may be a megabyte).
    joined = _hide_fragments(_PAT.sub(REDACTED, joined)[-(limit + 1024) :], secrets)
    return joined if len(joined) <= limit else "…" + joined[-limit:]


def _hide_fragments(text: str, secrets: Sequence[str]) -> str:
    """``text`` with every run of at least :data:`SHORTEST_FRAGMENT` characters that is
    part of one of ``secrets`` replaced by :data:`REDACTED`."""
    for secret in secrets:
        if len(secret) < SHORTEST_FRAGMENT:
            continue
        hidden = [False] * len(text)
        for start in range(len(text) - SHORTEST_FRAGMENT + 1):
            if text[start : start + SHORTEST_FRAGMENT] in secret:
                hidden[start : start + SHORTEST_FRAGMENT] = [True] * SHORTEST_FRAGMENT
        if any(hidden):
            text = _replace_marked(text, hidden)
    return text


def _replace_marked(text: str, hidden: list[bool]) -> str:
    """``text`` with each run of marked characters replaced by :data:`REDACTED`."""
    parts: list[str] = []
    for index, char in enumerate(text):
        if not hidden[index]:
            parts.append(char)
        elif index == 0 or not hidden[index - 1]:
            parts.append(REDACTED)
    return "".join(parts)


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
        timeout: float | None = None,  # noqa: ASYNC109 - each transport enforces it
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
            f"cannot exec into {where}: the API server refused our credentials (HTTP 401)"
        )
    said = one_line(reason, limit=100)
    return ExecUnavailableError(
        f"cannot exec into {where}: HTTP {status}{' ' + said if said else ''}"
    )
