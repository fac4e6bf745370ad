"""Kubernetes-style durations: what the CRD accepts is what the operator parses, and what
the operator writes back parses to the same value."""

from __future__ import annotations

import random
import re
from datetime import timedelta

import pytest
from pydantic import BaseModel, ValidationError

from craft_operator.api.durations import (
    DURATION_PATTERN,
    MAX_DURATION_LENGTH,
    Duration,
    format_duration,
    parse_duration,
    parse_stored_duration,
)
from craft_operator.api.stored import STORED
from tests.support.crd_validation import parse_go_duration

pytestmark = pytest.mark.unit


class Holder(BaseModel):
    """A model with one duration field."""

    value: Duration


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("30m", timedelta(minutes=30)),
        ("1h", timedelta(hours=1)),
        ("720h", timedelta(days=30)),
        ("1h30m", timedelta(minutes=90)),
        ("1.5h", timedelta(minutes=90)),
        ("90s", timedelta(seconds=90)),
        ("250ms", timedelta(milliseconds=250)),
        ("10us", timedelta(microseconds=10)),
        ("10µs", timedelta(microseconds=10)),
        ("0s", timedelta(0)),
        ("1m30s500ms", timedelta(seconds=90.5)),
    ],
)
def test_durations_parse_like_kubernetes(text: str, expected: timedelta) -> None:
    assert parse_duration(text) == expected
    assert parse_go_duration(text) == round(expected.total_seconds() * 1e9)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "30",
        "h",
        "1d",
        "1w",
        "-1h",
        "+1h",
        "1 h",
        "1h 30m",
        "30 minutes",
        "1.h",
        ".5h",
    ],
)
def test_strings_outside_the_crd_grammar_are_rejected_with_an_example(text: str) -> None:
    with pytest.raises(ValueError, match=r"e\.g\. 30m, 1h or 720h"):
        parse_duration(text)


def test_the_parser_and_the_crd_pattern_accept_the_same_strings() -> None:
    samples = ["30m", "1h30m", "1.5h", "1d", "-1h", "1 h", "0s", "10µs", "1.h", "h1"]
    for text in samples:
        by_pattern = re.match(DURATION_PATTERN, text) is not None
        try:
            parse_duration(text)
            by_parser = True
        except ValueError:
            by_parser = False
        assert by_parser is by_pattern, text


def test_every_string_the_crd_pattern_accepts_is_a_go_duration() -> None:
    # So CEL's duration() never fails on a value the format rule let through.
    for text in ["30m", "1h30m", "1.5h", "0s", "10µs", "1m30s500ms", "8760h", "0.000001s"]:
        assert re.match(DURATION_PATTERN, text)
        parse_go_duration(text)


def test_the_length_limit_matches_the_crd() -> None:
    longest = "1." + "0" * (MAX_DURATION_LENGTH - 3) + "s"
    assert parse_duration(longest) == timedelta(seconds=1)
    with pytest.raises(ValueError, match="not a duration"):
        parse_duration("1.0" + longest[2:])


@pytest.mark.parametrize(
    "text", ["3000000h", "100000h", "9999999m", "999999999s", "9" * 31 + "h", "2562048h"]
)
def test_a_part_too_long_for_go_is_rejected_by_the_format_not_by_duration(text: str) -> None:
    # CEL's duration() would fail on it with a type-conversion error instead of the message.
    assert not re.match(DURATION_PATTERN, text)
    with pytest.raises(ValueError, match=r"at most 5 digits in h, 6 in m, 8 in s"):
        parse_duration(text)


def test_no_duration_the_pattern_admits_is_beyond_go_s_range() -> None:
    # The worst case of each unit, repeated to the length limit, still parses in Go.
    for part in ["99999.9h", "999999.9m", "99999999.9s", "99999999999ms", "99999999999999us"]:
        text = (part * MAX_DURATION_LENGTH)[:MAX_DURATION_LENGTH]
        text = text[: text.rfind(part[-1]) + 1]  # whole parts only
        assert re.match(DURATION_PATTERN, text), text
        parse_go_duration(text)


@pytest.mark.parametrize("value", [10**20])
def test_a_duration_too_long_for_python_is_a_value_error_not_a_crash(value: str | int) -> None:
    with pytest.raises(ValidationError, match="longer than any duration"):
        Holder(value=value)


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (timedelta(0), "0s"),
        (timedelta(seconds=45), "45s"),
        (timedelta(minutes=30), "30m"),
        (timedelta(minutes=90), "1h30m"),
        (timedelta(days=30), "720h"),
        (timedelta(hours=1, seconds=5), "1h5s"),
        (timedelta(seconds=1.5), "1.5s"),
        (timedelta(milliseconds=250), "0.25s"),
        (timedelta(microseconds=1), "0.000001s"),
    ],
)
def test_durations_are_written_in_the_shortest_form_that_parses_back(
    value: timedelta, text: str
) -> None:
    assert format_duration(value) == text
    assert parse_duration(text) == value


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (timedelta(hours=99999), "99999h"),
        (timedelta(hours=100000), "99999h1h"),
        (timedelta(hours=199998), "99999h99999h"),
        (timedelta(hours=499995, minutes=9), "99999h99999h99999h99999h99999h9m"),
    ],
)
def test_a_duration_beyond_99999h_is_written_in_parts_the_crd_admits(
    value: timedelta, text: str
) -> None:
    # One part of 100000h or more is refused by the CRD's pattern (a 422), not the sum.
    assert format_duration(value) == text
    assert re.fullmatch(DURATION_PATTERN, text)
    assert len(text) <= MAX_DURATION_LENGTH
    assert parse_duration(text) == value
    assert parse_go_duration(text) == round(value.total_seconds() * 1e9)


@pytest.mark.parametrize(
    "value",
    [
        timedelta(hours=499995, minutes=10),
        timedelta(hours=600000),
        timedelta(hours=499995, microseconds=1),
        600000 * 3600,
    ],
)
def test_a_duration_too_long_to_write_in_32_characters_is_refused_for_a_new_object(
    value: timedelta | int,
) -> None:
    with pytest.raises(ValidationError, match="longer than the 32 characters of a duration"):
        Holder(value=value)
    assert Holder.model_validate({"value": value}, context=STORED).value.days > 20000


def test_a_negative_duration_is_written_in_go_syntax() -> None:
    # The CRD never holds one; the operator may still log how overdue something is.
    assert format_duration(timedelta(seconds=-90)) == "-1m30s"


def test_the_pydantic_type_reads_strings_numbers_and_timedeltas() -> None:
    assert Holder(value="1h").value == timedelta(hours=1)
    assert Holder(value=90).value == timedelta(seconds=90)
    assert Holder(value=timedelta(minutes=2)).value == timedelta(minutes=2)


def test_the_pydantic_type_serializes_to_the_wire_form() -> None:
    assert Holder(value=timedelta(hours=720)).model_dump(mode="json") == {"value": "720h"}
    assert Holder.model_validate_json('{"value": "1h30m"}').model_dump_json() == '{"value":"1h30m"}'


def test_a_bad_duration_is_a_validation_error_naming_the_value() -> None:
    with pytest.raises(ValidationError, match="'30 minutes' is not a duration"):
        Holder(value="30 minutes")


def test_the_json_schema_is_a_bounded_string() -> None:
    schema = Holder.model_json_schema()["properties"]["value"]
    schema.pop("title", None)
    assert schema == {"type": "string", "maxLength": MAX_DURATION_LENGTH}


@pytest.mark.parametrize(
    "text", ["100000h", "1000000m", "1000000000s", "2562047h", "9223372036854775807ns"]
)
def test_a_stored_duration_may_be_any_the_uncapped_grammar_and_go_admit(text: str) -> None:
    # The CRDs before 2026-11-27 had no cap on a part's digits; CEL's duration() then
    # admitted anything within Go's range.
    nanoseconds = parse_go_duration(text)
    assert parse_stored_duration(text) == timedelta(microseconds=round(nanoseconds / 1000))
    with pytest.raises(ValueError, match="not a duration"):
        parse_duration(text)


@pytest.mark.parametrize("text", ["2562048h", "9223372036854775808ns", "2562047h47m17s"])
def test_a_stored_duration_beyond_go_s_range_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="invalid duration"):
        parse_go_duration(text)
    with pytest.raises(ValueError, match="longer than the longest duration"):
        parse_stored_duration(text)


@pytest.mark.parametrize("text", ["", "1d", "-1h", "1.h", "1 h", "1." + "0" * 30 + "s"])
def test_a_stored_duration_keeps_the_grammar_and_the_length_limit(text: str) -> None:
    with pytest.raises(ValueError, match="not a duration"):
        parse_stored_duration(text)


def test_the_pydantic_type_reads_a_long_duration_only_from_a_stored_object() -> None:
    assert Holder.model_validate({"value": "100000h"}, context=STORED).value == timedelta(
        hours=100000
    )
    with pytest.raises(ValidationError, match="'100000h' is not a duration"):
        Holder.model_validate({"value": "100000h"})


@pytest.mark.parametrize(
    "text",
    [
        "99999h99999h99999h99999h999999m",
        "99999h99999h99999h59m59.999999s",
        "99999h99999h99999h99999h0.001s",
        "99999h99999h99999h99999.3608377h",
        "99999h99999h99999h99999h88us8.2s",
        "99999h99999h99999h99999h9999µs",
        "99999h99999h99999h4581.068h99us",
        "99999h99999h99999h93717.99m999us",
        "99999h99999h99999h458.999999999h",
    ],
)
def test_a_duration_the_crd_admits_is_written_in_a_form_it_admits(text: str) -> None:
    # Not refused locally as longer than 32 characters: the usual form (hours, then minutes
    # and seconds below 60) may be longer than the one given, so a shorter one is written.
    assert re.fullmatch(DURATION_PATTERN, text)
    assert len(text) <= MAX_DURATION_LENGTH
    value = Holder(value=text).value
    written = Holder(value=text).model_dump(mode="json")["value"]
    assert re.fullmatch(DURATION_PATTERN, written)
    assert len(written) <= MAX_DURATION_LENGTH
    assert parse_duration(written) == value


@pytest.mark.parametrize(
    "text",
    [
        "99999h0.1s",
        "99999h99999h99999h99999h999999m",
        "99999h99999h99999h59m59.999999s",
        "99999h99999h99999h99999h0.001s",
        "99999h99999h99999h99999h9m1.5s",
    ],
)
def test_a_duration_written_as_the_operator_writes_it_is_sent_as_given(text: str) -> None:
    # Exact, from the timedelta's whole days, seconds and microseconds: no float in between.
    assert format_duration(parse_duration(text)) == text


@pytest.mark.parametrize(
    "text",
    [
        "99999h99999h99999h4581.068h99us",
        "99999h99999h99999h93717.99m999us",
        "99999h99999h99999h802.999h9999us",
        "99999h99999h99999h999us4.99m999h",
    ],
)
def test_the_value_of_a_duration_the_crd_admits_is_written_in_a_form_it_admits(
    text: str,
) -> None:
    # Given as a timedelta, not as the string: a fraction of a unit, then a rest below a
    # power of ten of microseconds, is one of the forms searched.
    value = parse_duration(text)
    written = Holder(value=value).model_dump(mode="json")["value"]
    assert re.fullmatch(DURATION_PATTERN, written)
    assert len(written) <= MAX_DURATION_LENGTH
    assert parse_duration(written) == value


def test_a_long_duration_the_crd_admits_is_written_back_to_the_same_value() -> None:
    # Full 99999h parts, then hours, minutes, seconds and sub-second parts, the last of them
    # with a fraction: the strings near the length limit the backend would send.
    rng = random.Random(20261130)
    digits = {"h": 5, "m": 6, "s": 8, "ms": 11, "us": 14}
    fraction_digits = {"h": 8, "m": 7, "s": 6, "ms": 3, "us": 0}
    checked = 0
    while checked < 300:
        units = sorted(rng.sample(list(digits), rng.randint(1, 3)), key=list(digits).index)
        text = "99999h" * rng.randint(2, 5)
        for unit in units:
            whole = rng.choice(["9" * digits[unit], str(rng.randrange(10 ** digits[unit]))])
            if unit == units[-1] and fraction_digits[unit] and rng.random() < 0.5:
                whole += f".{rng.randrange(1, 10 ** rng.randint(1, fraction_digits[unit]))}"
            text += whole + unit
        if len(text) > MAX_DURATION_LENGTH:
            continue
        value = parse_duration(text)
        written = format_duration(value)
        assert re.fullmatch(DURATION_PATTERN, written), (text, written)
        assert len(written) <= MAX_DURATION_LENGTH, (text, written)
        assert parse_duration(written) == value, (text, written)
        assert parse_go_duration(written) == value // timedelta(microseconds=1) * 1000
        assert format_duration(parse_duration(written)) == written
        checked += 1
