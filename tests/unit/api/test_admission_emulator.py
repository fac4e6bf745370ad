"""The offline admission emulator behaves like the API server where our tests rely on it."""

from __future__ import annotations

from typing import Any

import celpy
import pytest
from celpy.evaluation import CELEvalError

from tests.support.crd_validation import (
    NOT_CHECKED,
    CrdValidator,
    evaluate_rule,
    is_transition_rule,
    parse_go_duration,
    to_json_schema,
)
from tests.unit.api.samples import sandbox

pytestmark = pytest.mark.unit

SECOND = 1_000_000_000


@pytest.mark.parametrize(
    ("text", "nanoseconds"),
    [
        ("0", 0),
        ("1h", 3600 * SECOND),
        ("1h30m", 5400 * SECOND),
        ("1.5h", 5400 * SECOND),
        (".5m", 30 * SECOND),
        ("1.m", 60 * SECOND),
        ("+5s", 5 * SECOND),
        ("-5s", -5 * SECOND),
        ("300ms", 300_000_000),
        ("2us", 2_000),
        ("2µs", 2_000),
        ("2μs", 2_000),
        ("7ns", 7),
        ("2562047h", 2562047 * 3600 * SECOND),
    ],
)
def test_go_durations_parse_like_time_parse_duration(text: str, nanoseconds: int) -> None:
    assert parse_go_duration(text) == nanoseconds


@pytest.mark.parametrize("text", ["", "1", "h", ".h", "1d", "1 h", "1hh", "2562048h", "--1s"])
def test_strings_go_rejects_are_rejected(text: str) -> None:
    with pytest.raises(ValueError, match="invalid duration"):
        parse_go_duration(text)


def test_cel_python_alone_lacks_the_micro_sign_unit_and_our_duration_has_it() -> None:
    environment = celpy.Environment()
    stock = environment.program(environment.compile("duration('1µs') < duration('1s')"))
    with pytest.raises(CELEvalError):
        stock.evaluate({})
    assert evaluate_rule("duration(self) < duration('1s')", "1µs")


@pytest.mark.parametrize(
    ("rule", "value", "expected"),
    [
        ("self.matches('^a+$')", "aaa", True),
        ("self.matches('b')", "abc", True),  # partial match, as RE2 in Kubernetes
        ("self.startsWith('/')", "/x", True),
        ("self.contains('..')", "a/b", False),
        ("self.size() <= 3", "abcd", False),
        ("self.x.size() == 2", {"x": [1, 2]}, True),
        ("duration(self) >= duration('1m')", "59s", False),
        ("duration(self) <= duration('8760h')", "8760h", True),
    ],
)
def test_the_cel_functions_the_crd_uses(rule: str, value: Any, expected: bool) -> None:
    assert bool(evaluate_rule(rule, value)) is expected


def test_transition_rules_are_the_ones_that_mention_old_self() -> None:
    assert is_transition_rule("self.id == oldSelf.id")
    assert not is_transition_rule("self.oldSelfish == 1")


def crd(node: dict[str, Any], *, rules: list[dict[str, str]] | None = None) -> dict[str, Any]:
    """A one-version CRD whose spec schema is ``node``."""
    root: dict[str, Any] = {
        "type": "object",
        "properties": {"metadata": {"type": "object"}, "spec": node},
    }
    if rules:
        root["x-kubernetes-validations"] = rules
    return {
        "spec": {
            "group": "example.com",
            "names": {"kind": "Thing"},
            "versions": [{"name": "v1", "storage": True, "schema": {"openAPIV3Schema": root}}],
        }
    }


def thing(spec: Any) -> dict[str, Any]:
    """A Thing object with ``spec``."""
    return {
        "apiVersion": "example.com/v1",
        "kind": "Thing",
        "metadata": {"name": "t"},
        "spec": spec,
    }


OBJECT_WITH_DEFAULTS = {
    "type": "object",
    "properties": {
        "a": {"type": "string", "default": "x"},
        "b": {
            "type": "object",
            "default": {},
            "properties": {"c": {"type": "integer", "default": 3}},
        },
    },
}


def test_defaults_apply_top_down_including_inside_defaulted_objects() -> None:
    result = CrdValidator(crd(OBJECT_WITH_DEFAULTS)).admit_create(thing({}))
    assert result.object["spec"] == {"a": "x", "b": {"c": 3}}


def test_null_in_a_non_nullable_field_is_dropped_and_then_defaulted() -> None:
    result = CrdValidator(crd(OBJECT_WITH_DEFAULTS)).admit_create(thing({"a": None}))
    assert result.accepted
    assert result.object["spec"]["a"] == "x"


STRICT_DECODING = 'Thing in version "v1" cannot be handled as a Thing: strict decoding error: '


def test_unknown_fields_fail_strict_decoding_as_a_bad_request_and_are_pruned_otherwise() -> None:
    manifest = thing({"a": "y", "zz": 1})
    refused = CrdValidator(crd(OBJECT_WITH_DEFAULTS)).admit_create(manifest)
    assert refused.messages == [STRICT_DECODING + 'unknown field "spec.zz"']
    assert refused.status == 400
    lenient = CrdValidator(crd(OBJECT_WITH_DEFAULTS), strict=False).admit_create(manifest)
    assert lenient.accepted
    assert "zz" not in lenient.object["spec"]


def test_every_unknown_field_is_named_in_one_message_in_sorted_order() -> None:
    manifest = thing({"zz": 1, "a": "y", "b": {"c": 1, "q": 2}})
    assert CrdValidator(crd(OBJECT_WITH_DEFAULTS)).admit_create(manifest).messages == [
        STRICT_DECODING + 'unknown field "spec.b.q", unknown field "spec.zz"'
    ]


def test_a_decoding_error_is_the_only_error_even_where_the_object_is_invalid_too() -> None:
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}}
    messages = CrdValidator(crd(schema)).admit_create(thing({"n": "one", "x": 1})).messages
    assert messages == [STRICT_DECODING + 'unknown field "spec.x"']


def test_an_object_schema_without_properties_keeps_no_fields() -> None:
    manifest = thing({"anything": 1})
    assert CrdValidator(crd({"type": "object"})).admit_create(manifest).messages == [
        STRICT_DECODING + 'unknown field "spec.anything"'
    ]
    lenient = CrdValidator(crd({"type": "object"}), strict=False).admit_create(manifest)
    assert lenient.object["spec"] == {}


def test_an_object_where_a_list_belongs_fails_as_unknown_fields_like_strict_kubectl() -> None:
    # The API server prunes by schema first, so the object's keys are "unknown fields".
    schema = {"type": "object", "properties": {"l": {"type": "array", "items": {"type": "string"}}}}
    messages = CrdValidator(crd(schema)).admit_create(thing({"l": {"k": "v"}})).messages
    assert messages == [STRICT_DECODING + 'unknown field "spec.l.k"']


def test_a_version_the_crd_does_not_define_has_no_schema_so_every_field_is_unknown() -> None:
    manifest = {**thing({}), "apiVersion": "example.com/v2"}
    refused = CrdValidator(crd({"type": "object"})).admit_create(manifest)
    assert refused.messages == [
        'Thing in version "v2" cannot be handled as a Thing: strict decoding error: '
        'unknown field "spec"'
    ]
    assert refused.status == 400
    lenient = CrdValidator(crd({"type": "object"}), strict=False).admit_create(manifest)
    assert lenient.messages == [
        "the API version in the data (example.com/v2) does not match the expected API "
        "version (example.com/v1)"
    ]


def test_another_group_is_refused_as_the_wrong_api_version() -> None:
    manifest = {**thing({"anything": 1}), "apiVersion": "other.example.com/v1"}
    assert CrdValidator(crd({"type": "object"})).admit_create(manifest).messages == [
        "the API version in the data (other.example.com/v1) does not match the expected API "
        "version (example.com/v1)"
    ]


def test_the_wrong_kind_is_the_only_error_before_the_cel_rules() -> None:
    schema = {"type": "object", "properties": {"n": {"type": "integer", "minimum": 5}}}
    manifest = {**thing({"n": 1}), "kind": "Other"}
    refused = CrdValidator(crd(schema)).admit_create(manifest)
    assert refused.messages == ['kind: Invalid value: "Other": must be Thing']
    assert refused.status == 422


def test_the_name_of_a_new_object_must_be_a_dns_subdomain() -> None:
    manifest = thing({})
    manifest["metadata"]["name"] = "Not_A_Name"
    (message,) = CrdValidator(crd({"type": "object"})).admit_create(manifest).messages
    assert message.startswith(
        'metadata.name: Invalid value: "Not_A_Name": a lowercase RFC 1123 subdomain must '
    )
    manifest["metadata"]["name"] = "a." * 127
    problems = CrdValidator(crd({"type": "object"})).admit_create(manifest).messages
    assert problems[0] == (
        f'metadata.name: Invalid value: "{"a." * 127}": must be no more than 253 characters'
    )


def test_int_or_string_accepts_both_and_applies_the_pattern_to_strings_only() -> None:
    schema = {"x-kubernetes-int-or-string": True, "pattern": "^[0-9]+m$"}
    assert to_json_schema(schema)["type"] == ["integer", "string"]
    validator = CrdValidator(crd(schema))
    assert validator.admit_create(thing(5)).accepted
    assert validator.admit_create(thing("5m")).accepted
    assert not validator.admit_create(thing("5")).accepted


def test_nullable_fields_accept_null() -> None:
    schema = {
        "type": "object",
        "properties": {"a": {"type": "string", "nullable": True, "enum": ["x"]}},
    }
    result = CrdValidator(crd(schema)).admit_create(thing({"a": None}))
    assert result.accepted
    assert result.object["spec"] == {"a": None}


def test_blocking_schema_errors_skip_the_cel_rules_with_a_note() -> None:
    schema = {
        "type": "object",
        "properties": {"n": {"type": "integer"}},
        "x-kubernetes-validations": [{"rule": "false", "message": "never"}],
    }
    messages = CrdValidator(crd(schema)).admit_create(thing({"n": "one"})).messages
    assert messages == [
        'spec.n: Invalid value: "string": spec.n in body must be of type integer: "string"',
        f"<nil>: Invalid value: null: {NOT_CHECKED}",
    ]


def test_non_blocking_schema_errors_still_run_the_cel_rules() -> None:
    schema = {
        "type": "object",
        "properties": {"s": {"type": "string", "pattern": "^a$"}},
        "x-kubernetes-validations": [{"rule": "false", "message": "never"}],
    }
    messages = CrdValidator(crd(schema)).admit_create(thing({"s": "b"})).messages
    assert messages == [
        "spec.s: Invalid value: \"b\": spec.s in body should match '^a$'",
        "spec: Invalid value: never",  # the value of an object is not shown
    ]


def test_rules_run_on_list_items_and_map_values_with_their_paths_and_values() -> None:
    item = {"type": "string", "x-kubernetes-validations": [{"rule": "self != 'bad'"}]}
    schema = {
        "type": "object",
        "properties": {
            "list": {"type": "array", "items": item},
            "map": {"type": "object", "additionalProperties": item},
        },
    }
    manifest = thing({"list": ["ok", "bad"], "map": {"k": "bad"}})
    assert CrdValidator(crd(schema)).admit_create(manifest).messages == [
        "spec.list[1]: Invalid value: \"bad\": failed rule: self != 'bad'",
        "spec.map[k]: Invalid value: \"bad\": failed rule: self != 'bad'",
    ]


def test_rules_at_the_root_report_the_nil_path_without_a_value() -> None:
    rules = [{"rule": "self.metadata.name == 'u'", "message": "only u"}]
    messages = CrdValidator(crd({"type": "object"}, rules=rules)).admit_create(thing({})).messages
    assert messages == ["<nil>: Invalid value: only u"]


def test_a_failing_rule_shows_numbers_as_numbers_and_keeps_long_values_whole() -> None:
    schema = {
        "type": "object",
        "properties": {
            "n": {"type": "integer", "x-kubernetes-validations": [{"rule": "self < 3"}]},
            "s": {"type": "string", "x-kubernetes-validations": [{"rule": "self.size() < 3"}]},
        },
    }
    long = "x" * 120
    messages = CrdValidator(crd(schema)).admit_create(thing({"n": 7, "s": long})).messages
    assert messages == [
        "spec.n: Invalid value: 7: failed rule: self < 3",
        f'spec.s: Invalid value: "{long}": failed rule: self.size() < 3',
    ]


def test_list_items_are_not_correlated_so_their_transition_rules_never_run() -> None:
    item = {
        "type": "object",
        "properties": {"v": {"type": "integer"}},
        "x-kubernetes-validations": [{"rule": "self.v == oldSelf.v", "message": "frozen"}],
    }
    schema = {"type": "object", "properties": {"items": {"type": "array", "items": item}}}
    validator = CrdValidator(crd(schema))
    result = validator.admit_update(thing({"items": [{"v": 1}]}), thing({"items": [{"v": 2}]}))
    assert result.accepted


def test_a_rule_that_cannot_be_evaluated_reports_the_cel_error() -> None:
    schema = {
        "type": "object",
        "x-kubernetes-validations": [{"rule": "self.missing == 1", "message": "m"}],
    }
    (message,) = CrdValidator(crd(schema)).admit_create(thing({})).messages
    assert message.startswith('spec: Invalid value: "object": ')
    assert "evaluating rule: self.missing == 1" in message


def test_root_rules_see_only_the_name_in_metadata() -> None:
    rules = [{"rule": "!has(self.metadata.labels)", "message": "labels visible"}]
    manifest = thing({})
    manifest["metadata"]["labels"] = {"a": "b"}
    assert CrdValidator(crd({"type": "object"}, rules=rules)).admit_create(manifest).accepted


def test_generate_name_stands_in_for_a_missing_name() -> None:
    rules = [{"rule": "self.metadata.name.startsWith('t-')", "message": "prefix"}]
    manifest = thing({})
    manifest["metadata"] = {"generateName": "t-"}
    validator = CrdValidator(crd({"type": "object"}, rules=rules))
    assert validator.admit_create(manifest).accepted
    manifest["metadata"] = {}
    assert validator.admit_create(manifest).messages[0] == (
        "metadata.name: Required value: name or generateName is required"
    )


def test_the_craftsandbox_validator_defaults_to_the_committed_crd() -> None:
    validator = CrdValidator.from_file()
    assert (validator.api_version, validator.kind) == ("craft.onyx.app/v1alpha1", "CraftSandbox")
    assert validator.admit_create(sandbox()).accepted
