"""The API's JSON is read fast, and nothing the standard library reads is refused."""

from __future__ import annotations

import json

import pytest

from craft_operator.kube import jsonio

pytestmark = pytest.mark.unit


def test_an_object_reads_back_as_the_standard_library_reads_it() -> None:
    text = '{"metadata":{"name":"p\\u00e9","labels":{"a":"日本"}},"n":[1,2.5,true,null]}'
    assert jsonio.loads(text.encode()) == json.loads(text)
    assert jsonio.loads(text) == json.loads(text)


def test_integers_of_64_bits_are_exact() -> None:
    """The API server sends no larger ones: it decodes numbers into int64 or float64."""
    assert jsonio.loads(b'{"a": 9223372036854775807, "b": -9223372036854775808}') == {
        "a": 2**63 - 1,
        "b": -(2**63),
    }


def test_what_orjson_refuses_and_the_standard_library_reads_is_read() -> None:
    value = jsonio.loads(b'{"x": NaN}')
    assert value["x"] != value["x"]


def test_what_is_not_json_raises_the_standard_librarys_error() -> None:
    with pytest.raises(json.JSONDecodeError):
        jsonio.loads(b"<html>a proxy</html>")


def test_json_nested_too_deeply_raises_a_value_error_as_other_refusals() -> None:
    """Not the standard library's RecursionError, which its callers do not expect."""
    with pytest.raises(ValueError, match="nested too deeply"):
        jsonio.loads(b"[" * 100_000 + b"]" * 100_000)


def test_encoding_is_compact_utf8_and_falls_back_for_what_orjson_refuses() -> None:
    assert jsonio.dumps({"a": [1, "é"]}) == '{"a":[1,"é"]}'.encode()
    assert json.loads(jsonio.dumps({"big": 2**70, 1: "x"})) == {"big": 2**70, "1": "x"}


def test_a_lone_surrogate_is_written_as_its_escape_not_refused() -> None:
    """A file name that is not UTF-8, as Python reads it, in a status message."""
    written = jsonio.dumps({"message": "cannot update \udcff", "name": "é"})
    assert written == b'{"message":"cannot update \\udcff","name":"\\u00e9"}'
    assert json.loads(written) == {"message": "cannot update \udcff", "name": "é"}
