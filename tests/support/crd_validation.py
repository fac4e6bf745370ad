"""Admit CraftSandbox manifests offline, the way the Kubernetes API server would.

The API server handles a create or update of a custom resource in this order, and so does
:class:`CrdValidator`:

1. *Decode*: fields the schema does not declare are an error under strict field validation
   (kubectl's default since 1.25) and are pruned otherwise; ``null`` in a non-nullable field
   is dropped. A decoding error refuses the whole request (400 Bad Request) before any
   validation, in one message: ``CraftSandbox in version "v1alpha1" cannot be handled as a
   CraftSandbox: strict decoding error: unknown field "spec.foo"``. So does an ``apiVersion``
   other than the endpoint's (``the API version in the data (…) does not match the expected
   API version (…)``); under strict validation, a version of the CRD's group that the CRD
   does not define has no schema, so every field but ``apiVersion``, ``kind`` and
   ``metadata`` is "unknown" first.
2. *Default*: every ``default`` in the schema is applied, top-down, so a defaulted object gets
   its own nested defaults. On update the old (stored) object is defaulted too, as the API
   server does when it reads from etcd.
3. *Schema*: the OpenAPI v3 structural schema is checked with ``jsonschema`` after translating
   the Kubernetes extensions (``x-kubernetes-int-or-string`` becomes integer-or-string,
   ``nullable`` adds ``null``, other ``x-kubernetes-*`` keys are ignored). Errors carry the
   API server's error types and wording (``spec.user.id: Required value``).
   Before the schema: ``kind`` must be the CRD's (if not, that is the only error before the
   CEL rules), and on create ``metadata.name`` must be a DNS subdomain (RFC 1123), as for
   every custom resource.
4. *CEL*: unless step 3 found a "blocking" error (wrong type, missing required field, enum,
   too long, too many -- the same list as the apiextensions strategy's ``hasBlockingErr``), the
   ``x-kubernetes-validations`` rules at every level of the schema are evaluated with
   ``cel-python``, ``self`` bound to the value at that level. Rules that mention ``oldSelf``
   (transition rules) run only on update and only where the old value exists; old values
   are correlated through object properties and map keys, never through list items (lists
   here are atomic), as in Kubernetes. A failed rule reports its ``message`` (or
   ``failed rule: <rule>``) with the offending value (omitted for objects and lists); a
   rule that cannot be evaluated reports the CEL error with the value's type.

Errors render like Go's ``field.Error``: the path of a root-level error is ``<nil>`` (Go's
nil ``*field.Path``), and CEL errors address map entries as ``[key]`` where the schema
validator writes ``.key``. An update (PUT) is addressed to the stored object's name, so a
new name is refused as not matching the URL, before validation.

With the status subresource on, the main resource ignores ``status``: it is dropped on
create and carried over from the old object on update.

Not emulated: CEL cost estimation and budgets (the structure tests bound every string and
list instead), validation ratcheting of unchanged invalid fields, ``messageExpression``,
``optionalOldSelf``, ``format`` checks, and ObjectMeta validation beyond the name.
These rules were checked against a real kube-apiserver (v1.37) by ``tests/cluster``.

cel-python differs from the Kubernetes CEL environment in one function this CRD uses:
its ``duration()`` rejects the ``µs`` unit that Go's ``time.ParseDuration`` accepts (and
accepts a ``d`` unit Go rejects). :func:`go_duration` replaces it with Go's grammar.
``matches`` (RE2, partial match), ``startsWith``, ``contains``, ``size`` and duration
comparisons behave as in Kubernetes.
"""

from __future__ import annotations

import copy
import functools
import json
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

import celpy
import jsonschema
import yaml
from celpy import celtypes
from celpy.adapter import json_to_cel
from celpy.evaluation import CELEvalError

from craft_operator.builders.quantities import parse_quantity

CRD_PATH = Path(__file__).resolve().parents[2] / "crds" / "craftsandboxes.craft.onyx.app.yaml"

REQUIRED = "Required value"
INVALID = "Invalid value"
NOT_SUPPORTED = "Unsupported value"
TOO_LONG = "Too long"
TOO_MANY = "Too many"
TYPE_INVALID = "Invalid type"
#: Not a field error: the request is refused before validation (400 Bad Request).
BAD_REQUEST = "Bad request"

#: Schema errors after which the API server does not evaluate CEL rules.
BLOCKING = frozenset({REQUIRED, NOT_SUPPORTED, TOO_LONG, TOO_MANY, TYPE_INVALID})
NOT_CHECKED = (
    "some validation rules were not checked because the object was invalid; "
    "correct the existing errors to complete validation"
)
#: A ``FieldError`` value that is not shown (Go's ``field.OmitValueType``).
OMIT = object()
#: The path Go prints for a nil ``*field.Path``: errors about the object as a whole.
ROOT = "<nil>"
_DNS1123_SUBDOMAIN = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
_DNS1123_SUBDOMAIN_MESSAGE = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, "
    "'-' or '.', and must start and end with an alphanumeric character "
    f"(e.g. 'example.com', regex used for validation is '{_DNS1123_SUBDOMAIN}')"
)
_DNS1123_SUBDOMAIN_MAX = 253


@dataclass(frozen=True)
class FieldError:
    """One rejected field, rendered like the API server's ``field.Error``."""

    path: str
    type: str
    detail: str = ""
    value: Any = None

    def __str__(self) -> str:
        if self.type == BAD_REQUEST:
            return self.detail
        return f"{self.path or ROOT}: {self.body}"

    @property
    def body(self) -> str:
        """What follows the path (the ``message`` of the Status object's ``causes``)."""
        if self.type in (REQUIRED, TOO_LONG, TOO_MANY):
            body = self.type
        elif self.type == NOT_SUPPORTED:
            body = f"{NOT_SUPPORTED}: {_show(self.value)}"
        elif self.value is OMIT:
            body = INVALID
        else:
            body = f"{INVALID}: {_show(self.value)}"
        return f"{body}: {self.detail}" if self.detail else body


@dataclass(frozen=True)
class AdmissionResult:
    """What the API server would answer, and the object it would store if it accepted."""

    errors: tuple[FieldError, ...]
    object: dict[str, Any] = field(default_factory=dict)

    @property
    def accepted(self) -> bool:
        """True when the API server would store the object."""
        return not self.errors

    @property
    def status(self) -> int:
        """The HTTP status: 400 when the request cannot be decoded, 422 when the object is
        invalid, 200 when it is accepted."""
        if any(error.type == BAD_REQUEST for error in self.errors):
            return 400
        return 422 if self.errors else 200

    @property
    def messages(self) -> list[str]:
        """The errors as the lines ``kubectl`` prints after ``is invalid:``."""
        return [str(error) for error in self.errors]


def _show(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)


def _join(path: str, part: str | int) -> str:
    if isinstance(part, int):
        return f"{path}[{part}]"
    return f"{path}.{part}" if path else part


# --- CEL functions cel-python lacks or gets wrong -------------------------------------------

_GO_UNITS_NS = {
    "ns": 1,
    "us": 1_000,
    "µs": 1_000,  # U+00B5 MICRO SIGN
    "μs": 1_000,  # U+03BC GREEK SMALL LETTER MU
    "ms": 1_000_000,
    "s": 1_000_000_000,
    "m": 60_000_000_000,
    "h": 3_600_000_000_000,
}
_GO_PART = re.compile(r"([0-9]*)(?:\.([0-9]*))?(ns|us|µs|μs|ms|s|m|h)")
_GO_MAX_NS = (1 << 63) - 1


def parse_go_duration(text: str) -> int:
    """Nanoseconds in ``text``, with exactly the grammar of Go's ``time.ParseDuration``."""
    rest, sign = text, 1
    if rest[:1] in ("+", "-"):
        sign = -1 if rest[0] == "-" else 1
        rest = rest[1:]
    if rest == "0":
        return 0
    if not rest:
        raise ValueError(f'time: invalid duration "{text}"')
    total = Fraction(0)
    while rest:
        match = _GO_PART.match(rest)
        if not match or not (match.group(1) or match.group(2)):
            raise ValueError(f'time: invalid duration "{text}"')
        whole, fraction, unit = match.group(1) or "0", match.group(2) or "", match.group(3)
        number = Fraction(int(whole)) + (
            Fraction(int(fraction), 10 ** len(fraction)) if fraction else 0
        )
        total += number * _GO_UNITS_NS[unit]
        rest = rest[match.end() :]
    if total > _GO_MAX_NS:
        raise ValueError(f'time: invalid duration "{text}"')
    return sign * int(total)


def go_duration(value: Any) -> celtypes.DurationType:
    """CEL ``duration(string)`` as Kubernetes (cel-go) implements it: Go duration syntax."""
    if isinstance(value, celtypes.DurationType):
        return value
    nanos = parse_go_duration(str(value))
    seconds, rest = divmod(nanos, 1_000_000_000)
    return celtypes.DurationType(seconds, rest)


#: A quantity's unit in :class:`CelQuantity`: Kubernetes reads quantities to the nano.
NANOS = 10**9


class CelQuantity(celtypes.IntType):
    """A Kubernetes quantity in CEL (its ``quantity()`` library), compared by value.

    cel-python has no such library; the value is kept in nano-units as an integer: Kubernetes
    reads a quantity to the nano, a finer one rounded up (as ``parse_quantity`` does), so
    this orders quantities exactly as ``resource.Quantity.Cmp`` does. It is compared and
    added only by the functions below, never by CEL's int64 arithmetic, so it may exceed
    int64 (8Pi is about 9e24 nanos).
    """

    def __new__(cls, value: Any) -> CelQuantity:
        return cls.of_nanos(int(parse_quantity(str(value)) * NANOS))

    @classmethod
    def of_nanos(cls, nanos: int) -> CelQuantity:
        """The quantity of ``nanos`` nano-units (past IntType's int64 check)."""
        return int.__new__(cls, nanos)


def cel_is_quantity(value: Any) -> celtypes.BoolType:
    """CEL ``isQuantity(string)``."""
    try:
        parse_quantity(str(value))
    except ValueError:
        return celtypes.BoolType(False)
    return celtypes.BoolType(True)


def cel_quantity(value: Any) -> CelQuantity:
    """CEL ``quantity(string)``: an error for what is no quantity, as in Kubernetes."""
    return CelQuantity(value)


def cel_is_less_than(left: Any, right: Any) -> celtypes.BoolType:
    """CEL ``<quantity>.isLessThan(<quantity>)``."""
    return celtypes.BoolType(int(left) < int(right))


def cel_is_greater_than(left: Any, right: Any) -> celtypes.BoolType:
    """CEL ``<quantity>.isGreaterThan(<quantity>)``."""
    return celtypes.BoolType(int(left) > int(right))


def cel_compare_to(left: Any, right: Any) -> celtypes.IntType:
    """CEL ``<quantity>.compareTo(<quantity>)``: -1, 0 or 1."""
    return celtypes.IntType((int(left) > int(right)) - (int(left) < int(right)))


def cel_as_approximate_float(value: Any) -> celtypes.DoubleType:
    """CEL ``<quantity>.asApproximateFloat()``: the nearest double here, where Kubernetes'
    may be off by a little more (``3.00000`` reads 3.0000000000000004 there)."""
    return celtypes.DoubleType(int(value) / NANOS)


def cel_sub(left: Any, right: Any) -> CelQuantity:
    """CEL ``<quantity>.sub(<quantity>)`` and ``<quantity>.sub(<int>)``."""
    nanos = int(right) if isinstance(right, CelQuantity) else int(right) * NANOS
    return CelQuantity.of_nanos(int(left) - nanos)


def cel_substring(text: Any, start: Any, end: Any = None) -> celtypes.StringType:
    """CEL ``<string>.substring(start[, end])`` of Kubernetes' strings library."""
    return celtypes.StringType(str(text)[int(start) : None if end is None else int(end)])


def cel_add(left: Any, right: Any) -> CelQuantity:
    """CEL ``<quantity>.add(<quantity>)`` and ``<quantity>.add(<int>)``."""
    nanos = int(right) if isinstance(right, CelQuantity) else int(right) * NANOS
    return CelQuantity.of_nanos(int(left) + nanos)


def cel_sum(values: Any) -> Any:
    """CEL ``<list>.sum()`` of Kubernetes' list library: 0 for an empty list."""
    return sum(values, celtypes.IntType(0))


CEL_FUNCTIONS: dict[str, Any] = {
    "sum": cel_sum,
    "duration": go_duration,
    "isQuantity": cel_is_quantity,
    "quantity": cel_quantity,
    "isLessThan": cel_is_less_than,
    "isGreaterThan": cel_is_greater_than,
    "add": cel_add,
    "compareTo": cel_compare_to,
    "asApproximateFloat": cel_as_approximate_float,
    "substring": cel_substring,
    "sub": cel_sub,
}

_ENVIRONMENT = celpy.Environment()


@functools.lru_cache(maxsize=256)
def _program(rule: str) -> celpy.Runner:
    return _ENVIRONMENT.program(_ENVIRONMENT.compile(rule), functions=CEL_FUNCTIONS)


def evaluate_rule(rule: str, self_value: Any, old_value: Any = None) -> Any:
    """Evaluate one CEL rule with ``self`` (and ``oldSelf``) bound to JSON values."""
    activation: dict[str, Any] = {"self": json_to_cel(self_value)}
    if old_value is not None:
        activation["oldSelf"] = json_to_cel(old_value)
    return _program(rule).evaluate(activation)


def is_transition_rule(rule: str) -> bool:
    """Whether the rule refers to ``oldSelf`` (and so runs only on update)."""
    return re.search(r"\boldSelf\b", rule) is not None


# --- schema translation ---------------------------------------------------------------------

_SCHEMA_KEYWORDS = {
    "type",
    "enum",
    "required",
    "pattern",
    "maxLength",
    "minLength",
    "maxItems",
    "minItems",
    "maxProperties",
    "minProperties",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "multipleOf",
}


def to_json_schema(node: Mapping[str, Any]) -> dict[str, Any]:
    """Translate one structural OpenAPI v3 schema node into JSON Schema (draft 4)."""
    out: dict[str, Any] = {key: copy.deepcopy(node[key]) for key in _SCHEMA_KEYWORDS & set(node)}
    if "properties" in node:
        out["properties"] = {
            name: to_json_schema(child) for name, child in node["properties"].items()
        }
    if isinstance(node.get("additionalProperties"), Mapping):
        out["additionalProperties"] = to_json_schema(node["additionalProperties"])
    if "items" in node:
        out["items"] = to_json_schema(node["items"])
    for combinator in ("anyOf", "oneOf", "allOf"):
        if combinator in node:
            out[combinator] = [to_json_schema(child) for child in node[combinator]]
    if "not" in node:
        out["not"] = to_json_schema(node["not"])
    if node.get("x-kubernetes-int-or-string"):
        out.pop("type", None)
        out["type"] = ["integer", "string"]
    if node.get("nullable") and "type" in out:
        types = out["type"] if isinstance(out["type"], list) else [out["type"]]
        out["type"] = [*types, "null"]
        if "enum" in out:
            out["enum"] = [*out["enum"], None]
    return out


def _type_name(node: Mapping[str, Any]) -> str:
    # An int-or-string node has no type, so the API server shows "" here.
    return str(node.get("type", ""))


def _path_of(parts: Sequence[str | int]) -> str:
    path = ""
    for part in parts:
        path = _join(path, part)
    return path


def _schema_errors(
    value: Any, schema: Mapping[str, Any], validator: jsonschema.protocols.Validator
) -> Iterator[FieldError]:
    for error in validator.iter_errors(value):
        parts = list(error.absolute_path)
        path = _path_of(parts)
        keyword = error.validator
        if keyword == "required":
            instance = error.instance if isinstance(error.instance, Mapping) else {}
            for name in error.validator_value:
                if name not in instance:
                    yield FieldError(_join(path, name), REQUIRED)
        elif keyword in ("type", "anyOf"):
            wanted = error.validator_value
            if wanted == ["integer", "string"]:  # x-kubernetes-int-or-string
                wanted = "integer,string"
            elif keyword == "anyOf":
                wanted = "integer-or-string"
            elif isinstance(wanted, list):
                wanted = " or ".join(str(item) for item in wanted if item != "null")
            actual = _json_type(error.instance)
            yield FieldError(
                path,
                TYPE_INVALID,
                f"{path} in body must be of type {wanted}: {json.dumps(actual)}",
                actual,
            )
        elif keyword == "enum":
            supported = ", ".join(json.dumps(item) for item in error.validator_value)
            yield FieldError(path, NOT_SUPPORTED, f"supported values: {supported}", error.instance)
        elif keyword == "maxLength":
            yield FieldError(
                path, TOO_LONG, f"may not be more than {error.validator_value} bytes", None
            )
        elif keyword in ("maxItems", "maxProperties"):
            yield FieldError(
                path,
                TOO_MANY,
                f"{len(error.instance)}: must have at most {error.validator_value} items",
            )
        elif keyword == "minLength":
            yield FieldError(
                path,
                INVALID,
                f"{path} in body should be at least {error.validator_value} chars long",
                error.instance,
            )
        elif keyword == "pattern":
            yield FieldError(
                path,
                INVALID,
                f"{path} in body should match '{error.validator_value}'",
                error.instance,
            )
        elif keyword == "minimum":
            yield FieldError(
                path,
                INVALID,
                f"{path} in body should be greater than or equal to {error.validator_value}",
                error.instance,
            )
        elif keyword == "maximum":
            yield FieldError(
                path,
                INVALID,
                f"{path} in body should be less than or equal to {error.validator_value}",
                error.instance,
            )
        else:
            yield FieldError(path, INVALID, error.message, error.instance)


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, Mapping):
        return "object"
    return "array"


# --- decoding: unknown fields, nulls and defaults ---------------------------------------------


#: Root fields the API server keeps as sent (metadata is validated as ObjectMeta instead).
_ALWAYS_KEPT = frozenset({"apiVersion", "kind", "metadata"})


def _prune(value: Any, schema: Mapping[str, Any], path: str, unknown: list[str]) -> Any:
    """Drop undeclared fields (recording their paths) and nulls in non-nullable fields."""
    if isinstance(value, Mapping):
        if schema.get("x-kubernetes-preserve-unknown-fields") and "properties" not in schema:
            return dict(value)
        properties = schema.get("properties")
        extra = schema.get("additionalProperties")
        out: dict[str, Any] = {}
        for key, item in value.items():
            if not path and key in _ALWAYS_KEPT:
                out[key] = item
                continue
            if properties is not None and key in properties:
                child = properties[key]
            elif isinstance(extra, Mapping):
                child = extra
            else:  # also every field of an object schema that declares none
                unknown.append(_join(path, key))
                continue
            if item is None and not child.get("nullable"):
                continue
            out[key] = _prune(item, child, _join(path, key), unknown)
        return out
    if isinstance(value, list) and isinstance(schema.get("items"), Mapping):
        return [
            _prune(item, schema["items"], _join(path, index), unknown)
            for index, item in enumerate(value)
        ]
    return value


def apply_defaults(value: Any, schema: Mapping[str, Any]) -> Any:
    """Fill in every schema ``default`` that applies to ``value``, top-down, in place."""
    if isinstance(value, dict):
        for name, child in schema.get("properties", {}).items():
            if name not in value and "default" in child:
                value[name] = copy.deepcopy(child["default"])
            if name in value:
                apply_defaults(value[name], child)
        extra = schema.get("additionalProperties")
        if isinstance(extra, Mapping):
            for item in value.values():
                apply_defaults(item, extra)
    elif isinstance(value, list) and isinstance(schema.get("items"), Mapping):
        for item in value:
            apply_defaults(item, schema["items"])
    return value


# --- CEL walk -----------------------------------------------------------------------------------

_MISSING = object()


def _cel_errors(
    value: Any, schema: Mapping[str, Any], path: str, old: Any, *, root: bool = False
) -> Iterator[FieldError]:
    self_value = _root_view(value) if root else value
    old_value = _root_view(old) if root and old is not _MISSING else old
    for rule in schema.get("x-kubernetes-validations", []):
        expression = rule["rule"]
        if is_transition_rule(expression) and old is _MISSING:
            continue
        field_path = rule.get("fieldPath", "")
        target = path + field_path if path else field_path.lstrip(".")
        try:
            result = evaluate_rule(expression, self_value, None if old is _MISSING else old_value)
        except CELEvalError as exc:
            reason = _cel_error_reason(exc)
            yield FieldError(
                target,
                INVALID,
                f"{reason} evaluating rule: {expression}",
                _type_name(schema),
            )
            continue
        if not isinstance(result, celtypes.BoolType):
            yield FieldError(
                target,
                INVALID,
                f"rule did not evaluate to a bool: {expression}",
                _type_name(schema),
            )
        elif not result:
            message = rule.get("message") or f"failed rule: {expression}"
            shown = OMIT if _type_name(schema) in ("object", "array") else value
            yield FieldError(target, INVALID, message, shown)
    if isinstance(value, Mapping):
        properties = schema.get("properties", {})
        extra = schema.get("additionalProperties")
        for key, item in value.items():
            if key in properties:
                child, child_path = properties[key], _join(path, key)
            elif isinstance(extra, Mapping):  # a map entry: Go's field.Path.Key
                child, child_path = extra, f"{path}[{key}]"
            else:
                continue
            old_item = old.get(key, _MISSING) if isinstance(old, Mapping) else _MISSING
            yield from _cel_errors(item, child, child_path, old_item)
    elif isinstance(value, list) and isinstance(schema.get("items"), Mapping):
        for index, item in enumerate(value):
            yield from _cel_errors(item, schema["items"], _join(path, index), _MISSING)


def _cel_error_reason(exc: CELEvalError) -> str:
    # cel-python wraps a failing function as (summary, exception type, exception args).
    args = exc.args
    if len(args) >= 3 and isinstance(args[2], tuple) and args[2]:
        return str(args[2][0])
    return str(args[0]) if args else str(exc)


def _root_view(obj: Any) -> Any:
    """At the resource root, CEL sees only ``metadata.name`` and ``metadata.generateName``."""
    if not isinstance(obj, Mapping):
        return obj
    metadata = obj.get("metadata") or {}
    visible = {key: metadata[key] for key in ("name", "generateName") if key in metadata}
    return {**obj, "metadata": visible}


# --- the validator ------------------------------------------------------------------------------


class CrdValidator:
    """Admission of one CRD version's objects, as the API server performs it."""

    def __init__(self, crd: Mapping[str, Any], version: str | None = None, *, strict: bool = True):
        """Admit objects of ``crd``'s ``version`` (default: the storage version)."""
        spec = crd["spec"]
        versions = spec["versions"]
        chosen = next(
            (
                item
                for item in versions
                if item["name"] == version or (version is None and item.get("storage"))
            ),
            None,
        )
        if chosen is None:
            raise ValueError(f"the CRD has no version {version!r}")
        self.group: str = spec["group"]
        self.version: str = chosen["name"]
        self.api_version = f"{self.group}/{self.version}"
        self.kind = spec["names"]["kind"]
        self.schema: dict[str, Any] = chosen["schema"]["openAPIV3Schema"]
        self.status_subresource = "status" in (chosen.get("subresources") or {})
        self.strict = strict
        self._validator = jsonschema.Draft4Validator(to_json_schema(self.schema))

    @classmethod
    def from_file(cls, path: Path = CRD_PATH, *, strict: bool = True) -> CrdValidator:
        """A validator for the CRD in a YAML file (default: the committed CraftSandbox CRD)."""
        return cls(yaml.safe_load(path.read_text(encoding="utf-8")), strict=strict)

    def decode(self, manifest: Mapping[str, Any]) -> tuple[dict[str, Any], list[FieldError]]:
        """Prune and default ``manifest`` as the API server decodes a request or stored object;
        the request's decoding error (400), if the API server could not decode it."""
        unknown: list[str] = []
        obj = _prune(copy.deepcopy(dict(manifest)), self.schema, "", unknown)
        apply_defaults(obj, self.schema)
        return obj, self._decoding_errors(manifest, unknown)

    def _decoding_errors(self, manifest: Mapping[str, Any], unknown: list[str]) -> list[FieldError]:
        sent = str(manifest.get("apiVersion", ""))
        group, _, version = sent.rpartition("/")
        if group != self.group:
            unknown = []  # another group's object is not decoded with this schema
        elif version != self.version:  # a version without a schema: nothing is known
            unknown = [key for key in manifest if key not in _ALWAYS_KEPT]
        if unknown and self.strict:
            fields = ", ".join(f'unknown field "{path}"' for path in sorted(unknown))
            return [
                FieldError(
                    "",
                    BAD_REQUEST,
                    f'{manifest.get("kind", "")} in version "{version}" cannot be handled as a '
                    f"{self.kind}: strict decoding error: {fields}",
                )
            ]
        if sent != self.api_version:
            return [
                FieldError(
                    "",
                    BAD_REQUEST,
                    f"the API version in the data ({sent}) does not match the expected API "
                    f"version ({self.api_version})",
                )
            ]
        return []

    def admit_create(self, manifest: Mapping[str, Any]) -> AdmissionResult:
        """What a ``create`` of ``manifest`` returns."""
        obj, errors = self.decode(manifest)
        if errors:  # a request that cannot be decoded is refused before any validation
            return AdmissionResult(tuple(errors), obj)
        if self.status_subresource:
            obj.pop("status", None)
        return self._validate(obj, _MISSING, creating=True)

    def admit_update(self, old: Mapping[str, Any], new: Mapping[str, Any]) -> AdmissionResult:
        """What an ``update`` (a PUT to the stored ``old`` object's URL) to ``new`` returns."""
        stored, _ = self.decode(old)
        obj, errors = self.decode(new)
        if errors:
            return AdmissionResult(tuple(errors), obj)
        old_name = (stored.get("metadata") or {}).get("name")
        new_name = (obj.get("metadata") or {}).get("name")
        if old_name != new_name:
            message = f"the name of the object ({new_name}) does not match the name on the URL"
            return AdmissionResult((FieldError("", BAD_REQUEST, f"{message} ({old_name})"),), obj)
        if self.status_subresource:
            obj.pop("status", None)
            if "status" in stored:
                obj["status"] = copy.deepcopy(stored["status"])
        return self._validate(obj, stored, creating=False)

    def _metadata_errors(self, obj: dict[str, Any], *, creating: bool) -> list[FieldError]:
        errors = []
        metadata = obj.setdefault("metadata", {})
        if not isinstance(metadata, dict):
            errors.append(FieldError("metadata", TYPE_INVALID, "must be an object", metadata))
        elif not metadata.get("name"):
            if metadata.get("generateName"):
                # The API server appends five random characters; any five will do here.
                metadata["name"] = f"{metadata['generateName']}x7k2q"
            else:
                errors.append(
                    FieldError("metadata.name", REQUIRED, "name or generateName is required")
                )
        if creating and isinstance(metadata, dict) and metadata.get("name"):
            errors += [
                FieldError("metadata.name", INVALID, problem, metadata["name"])
                for problem in _dns1123_subdomain_problems(str(metadata["name"]))
            ]
        return errors

    def _validate(self, obj: dict[str, Any], old: Any, *, creating: bool) -> AdmissionResult:
        if obj.get("kind") != self.kind:  # the only error before the CEL rules
            errors = [FieldError("kind", INVALID, f"must be {self.kind}", obj.get("kind"))]
        else:
            errors = self._metadata_errors(obj, creating=creating)
            errors += _schema_errors(obj, self.schema, self._validator)
        if any(error.type in BLOCKING for error in errors):
            errors.append(FieldError("", INVALID, NOT_CHECKED, None))
        else:
            errors += _cel_errors(obj, self.schema, "", old, root=True)
        return AdmissionResult(tuple(errors), obj)


def _dns1123_subdomain_problems(name: str) -> list[str]:
    """Why ``name`` is not a DNS subdomain, in the words of Go's ``IsDNS1123Subdomain``."""
    problems = []
    if len(name) > _DNS1123_SUBDOMAIN_MAX:
        problems.append(f"must be no more than {_DNS1123_SUBDOMAIN_MAX} characters")
    if not re.fullmatch(_DNS1123_SUBDOMAIN, name):
        problems.append(_DNS1123_SUBDOMAIN_MESSAGE)
    return problems


@functools.lru_cache(maxsize=1)
def craftsandbox_validator() -> CrdValidator:
    """The validator for the committed CraftSandbox CRD."""
    return CrdValidator.from_file(CRD_PATH)


def validate_create(manifest: Mapping[str, Any]) -> list[str]:
    """Errors the API server would return for creating ``manifest`` (empty: accepted)."""
    return craftsandbox_validator().admit_create(manifest).messages


def validate_update(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """Errors the API server would return for updating ``old`` to ``new`` (empty: accepted)."""
    return craftsandbox_validator().admit_update(old, new).messages
