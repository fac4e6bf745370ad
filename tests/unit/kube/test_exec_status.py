"""The exit status message (the exec API's error channel): its code read, anything else an
ExecError that callers can handle, its message one short plain line, and a failure that
waiting may mend retried."""

from __future__ import annotations

import json

import pytest

from craft_operator.kube.exec import STATUS_MESSAGE_LIMIT, ExecError, parse_exec_status

pytestmark = [pytest.mark.unit]


def status(**fields: object) -> bytes:
    return json.dumps({"metadata": {}, "status": "Failure", **fields}).encode()


def non_zero(*causes: object) -> bytes:
    return status(reason="NonZeroExitCode", details={"causes": list(causes)})


@pytest.mark.parametrize(
    "raw",
    [
        b"[]",
        b'"Success"',
        b"42",
        b"null",
        b'{"status": ["Success"]}',
        b'{"reason": "NonZeroExitCode", "details": "abc"}',
        b'{"reason": "NonZeroExitCode", "details": {"causes": "abc"}}',
        b'{"reason": "NonZeroExitCode", "details": {"causes": ["x", 1, null]}}',
        non_zero({"reason": "ExitCode", "message": None}),
        non_zero({"reason": "ExitCode", "message": 7}),
        non_zero({"reason": "ExitCode", "message": "seven"}),
        b'{"status": "Failure", "message": {"nested": "object"}}',
        b'{"status": "Failure", "message": 12}',
        b"\xff\xfe not even text",
        b"[" * 100_000,
        b'{"a":' * 50_000 + b"1" + b"}" * 50_000,
        b'{"message": "' + b"x" * (128 * 1024) + b'"}',
    ],
    ids=lambda raw: repr(raw[:40]),
)
def test_a_status_that_is_not_what_the_api_server_sends_is_an_exec_error(raw: bytes) -> None:
    # Callers catch ExecError only: anything else would end the reconcile pass.
    with pytest.raises(ExecError) as raised:
        parse_exec_status(raw)

    assert raised.value.retryable
    assert len(str(raised.value)) <= STATUS_MESSAGE_LIMIT + 100


@pytest.mark.parametrize("code", ["0", "-5", "٣", " 42", "4_2", "+3"])
def test_a_non_zero_exit_status_without_a_plain_non_zero_code_is_not_taken_for_one(
    code: str,
) -> None:
    with pytest.raises(ExecError):
        parse_exec_status(non_zero({"reason": "ExitCode", "message": code}))


def test_the_exit_code_is_read_from_the_cause_that_gives_it() -> None:
    raw = non_zero(
        "junk", {"reason": "Other", "message": "1"}, {"reason": "ExitCode", "message": "137"}
    )

    assert parse_exec_status(raw) == 137


def test_the_exit_code_is_read_however_long_the_message() -> None:
    raw = non_zero({"reason": "ExitCode", "message": "3"})
    loaded = json.loads(raw)
    loaded["message"] = "m" * 50_000

    assert parse_exec_status(json.dumps(loaded).encode()) == 3


def test_a_status_message_reaches_a_condition_as_one_short_plain_line_without_a_token() -> None:
    token = "onyx_pat_" + "A" * 256
    message = f"\x1b[2J\x1b[31mfailed\nline two {token} and\r\n" + "x " * 30_000 + "the end"

    with pytest.raises(ExecError) as raised:
        parse_exec_status(status(reason="InternalError", message=message))

    said = str(raised.value)
    assert said.startswith("the command could not be run: ")
    assert said.endswith("x x the end")
    assert len(said) <= len("the command could not be run: ") + STATUS_MESSAGE_LIMIT + 1
    assert all(ord(character) >= 0x20 for character in said)
    assert "A" * 8 not in said


def test_the_end_of_a_status_message_that_reaches_a_condition_holds_no_token_or_control() -> None:
    # What is kept is the end of the message: there too, a token is redacted and escape
    # sequences and line breaks are gone.
    token = "onyx_pat_" + "B" * 256
    message = "x " * 30_000 + f"failed\x1b[2J\r\nwith {token}\x07 at the end"

    with pytest.raises(ExecError) as raised:
        parse_exec_status(status(reason="InternalError", message=message))

    said = str(raised.value)
    assert said.endswith("failed; with [redacted] at the end")
    assert all(ord(character) >= 0x20 for character in said)
    assert "B" * 8 not in said


@pytest.mark.parametrize(
    ("reason", "message"),
    [
        ("InternalError", "error executing command in container: container not running"),
        ("InternalError", "rpc error: code = Unavailable desc = connection refused"),
        ("SomethingNew", "a reason this operator does not know"),
        (None, None),
    ],
)
def test_an_internal_error_or_an_unknown_failure_is_retried(
    reason: str | None, message: str | None
) -> None:
    with pytest.raises(ExecError) as raised:
        parse_exec_status(status(reason=reason, message=message))

    assert raised.value.retryable


@pytest.mark.parametrize(
    "message",
    [
        # The stand-in kubelet refreshing a volume under two execs at once.
        "volume skills: rename /pods/u/volumes/skills/SKILL.md.writing /pods/u/volumes/skills/"
        "SKILL.md: no such file or directory",
        "open /run/containerd/io.containerd.runtime.v2.task/k8s.io/abc/config.json: no such "
        "file or directory",
        "mkdir /var/lib/kubelet/pods/x: permission denied",
    ],
)
def test_the_same_words_about_anything_but_the_program_are_retried(message: str) -> None:
    with pytest.raises(ExecError) as raised:
        parse_exec_status(status(reason="InternalError", message=message))

    assert raised.value.retryable


@pytest.mark.parametrize(
    "message",
    [
        'OCI runtime exec failed: exec failed: unable to start container process: exec: "tar": '
        "executable file not found in $PATH: unknown",
        'exec: "/usr/local/bin/onyx-cli": stat /usr/local/bin/onyx-cli: no such file or directory',
        'exec: "/workspace/run": permission denied',
    ],
)
def test_a_program_missing_from_the_image_or_not_executable_is_a_permanent_error(
    message: str,
) -> None:
    with pytest.raises(ExecError) as raised:
        parse_exec_status(status(reason="InternalError", message=message))

    assert not raised.value.retryable
