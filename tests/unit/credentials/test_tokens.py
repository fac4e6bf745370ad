"""Tokens follow Onyx's format, hash and display rules."""

from __future__ import annotations

import hashlib
import re
import string

from craft_operator.credentials.tokens import (
    display_form,
    generate_token,
    hash_token,
    pat_name,
)

URLSAFE = set(string.ascii_letters + string.digits + "-_")


def test_a_token_is_the_prefix_and_256_urlsafe_characters() -> None:
    token = generate_token().get_secret_value()

    assert token.startswith("onyx_pat_")
    random_part = token.removeprefix("onyx_pat_")
    assert len(random_part) == 256
    assert set(random_part) <= URLSAFE


def test_tokens_are_random() -> None:
    assert len({generate_token().get_secret_value() for _ in range(50)}) == 50


def test_another_tenant_gets_the_quoted_tenant_and_a_dot() -> None:
    token = generate_token("acme corp/eu").get_secret_value()

    assert token.startswith("onyx_pat_acme%20corp/eu.")
    assert len(token.split(".", 1)[1]) == 256


def test_the_default_tenant_has_no_tenant_part() -> None:
    assert "." not in generate_token("public").get_secret_value()


def test_the_hash_is_unsalted_sha256_hex_of_the_whole_token() -> None:
    token = generate_token()

    hashed = hash_token(token)

    assert hashed == hashlib.sha256(token.get_secret_value().encode()).hexdigest()
    assert re.fullmatch(r"[0-9a-f]{64}", hashed)


def test_the_display_form_shows_12_characters_stars_and_the_last_4() -> None:
    token = "onyx_pat_" + "a" * 250 + "WXYZ"

    assert display_form(token) == "onyx_pat_aaa****WXYZ"


def test_the_token_never_shows_in_repr_or_str() -> None:
    token = generate_token()

    assert token.get_secret_value() not in repr(token)
    assert token.get_secret_value() not in str(token)


def test_the_pat_name_identifies_the_sandbox() -> None:
    assert pat_name("team-a", "alice") == "craft-sandbox team-a/alice"
