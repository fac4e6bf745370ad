"""What a pod printed, made fit for a condition or an event: only its end is ever read, and
a token in it never gets through, not even cut into pieces."""

from __future__ import annotations

import pytest

from craft_operator.credentials.tokens import generate_token
from craft_operator.kube.exec import EXCERPT_WINDOW, WITHHELD, ExecResult, one_line

pytestmark = [pytest.mark.unit]

TOKEN = generate_token("acme corp").get_secret_value()


def excerpt(stderr: bytes, limit: int = 300, secrets: tuple[str, ...] = ()) -> str:
    return ExecResult(1, b"", stderr).stderr_excerpt(limit, secrets=secrets)


def test_an_excerpt_of_a_huge_output_is_made_from_its_last_few_kib_only() -> None:
    # Exactly one window: blank lines, then the message. Whatever comes before it (here
    # 4 MiB of carriage returns, which cost seconds to clean, and an earlier line) is never
    # looked at, so the work is the same however much a pod prints.
    message = b"the real error"
    window = b"\n" * (EXCERPT_WINDOW - len(message)) + message
    huge = b"\r" * (4 * 1024 * 1024) + b"an earlier line" + window

    assert excerpt(huge) == excerpt(window) == "the real error"


def test_text_too_long_is_read_from_its_end_only_too() -> None:
    text = "an earlier line" + " " * EXCERPT_WINDOW + "the real error"

    assert one_line(text) == "the real error"


def test_a_token_the_window_cuts_in_two_leaves_no_piece_of_it() -> None:
    # The window starts five characters before the end of a token: that piece has no
    # prefix to be recognised by, and would be shown, were it not dropped.
    after = b" refused\n" + b" " * (EXCERPT_WINDOW - 5 - len(b" refused\n"))
    stderr = b"header\n" + TOKEN.encode() + after

    shown = excerpt(stderr)

    assert shown == "refused"
    assert TOKEN[-5:] not in shown


def test_a_window_that_is_one_long_word_keeps_all_but_what_could_be_a_token() -> None:
    shown = excerpt(b"x" * (2 * EXCERPT_WINDOW), limit=100)

    assert shown == "…" + "x" * 100


def test_a_token_printed_in_seven_character_lines_withholds_the_whole_excerpt() -> None:
    # Every line is shorter than the shortest fragment looked for; together they are the
    # token, and once joined ("; ") would let a reader put it back together.
    lines = "\n".join(TOKEN[start : start + 7] for start in range(0, len(TOKEN), 7))

    assert excerpt(lines.encode(), secrets=(TOKEN,)) == WITHHELD


@pytest.mark.parametrize(
    "between", [" ", "'", '"', "\x1b[0m", "\r\n", "\t|\t", "\x00", " onyx_pat_ "]
)
def test_a_token_with_other_characters_between_its_pieces_withholds_the_excerpt(
    between: str,
) -> None:
    pieces = [TOKEN[start : start + 5] for start in range(20, len(TOKEN), 5)]
    stderr = f"error: {between.join(pieces)} refused".encode()

    assert excerpt(stderr, secrets=(TOKEN,)) == WITHHELD


def test_eight_characters_of_the_token_alone_withhold_the_excerpt() -> None:
    assert excerpt(f"near {TOKEN[100:108]} end".encode(), secrets=(TOKEN,)) == WITHHELD


def test_an_excerpt_without_a_piece_of_the_token_is_kept_whole() -> None:
    stderr = b"Error: cannot reach https://onyx.example.com: connection refused\n"

    assert excerpt(stderr, secrets=(TOKEN,)) == (
        "Error: cannot reach https://onyx.example.com: connection refused"
    )


def test_without_the_secret_anything_like_a_pat_is_still_redacted() -> None:
    assert excerpt(f"bad {TOKEN} here".encode()) == "bad [redacted] here"


def test_a_token_the_length_limit_cuts_in_two_leaves_no_piece_of_it() -> None:
    # The limit keeps the end, which here starts inside the token: cut first, what is left
    # of it has no prefix to be recognised by, and would be shown.
    shown = excerpt(f"error: {TOKEN} was refused".encode(), limit=60)

    assert shown == "error: [redacted] was refused"
    assert TOKEN[-20:] not in shown
