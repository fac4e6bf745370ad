"""The base of every API model and the helpers that write its admission rules.

A field's rule is written twice: as a CEL rule in the schema (``x-kubernetes-validations``,
with a message for people), enforced by the API server, and as a pydantic validator
(``check_*``), so that the models agree with the CRD on what is valid.
"""

from __future__ import annotations

import re
from datetime import timedelta
from decimal import ROUND_UP, Context, Decimal
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, WithJsonSchema
from pydantic.alias_generators import to_camel

from craft_operator.api.constants import (
    DNS_SUBDOMAIN_PATTERN,
    QUANTITY_LIMIT,
    QUANTITY_LIMIT_VALUE,
    QUANTITY_MAX_LENGTH,
    QUANTITY_PATTERN,
    STORED_URL_PATTERN,
    URL_PATTERN,
)
from craft_operator.api.durations import DURATION_FORMAT_HINT, DURATION_PATTERN
from craft_operator.api.stored import STORED as STORED
from craft_operator.api.stored import storing as storing


def cel(rule: str, message: str, **extra: str) -> dict[str, str]:
    """One CEL validation rule with the message shown to whoever sent the object."""
    return {"rule": rule, "message": message, **extra}


def cel_string(text: str) -> str:
    """Quote ``text`` as a single-quoted CEL string literal (for regexes in rules)."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def cel_rules(*rules: dict[str, str]) -> dict[str, Any]:
    """JSON-schema extras that attach CEL rules to a field or model."""
    return {"x-kubernetes-validations": list(rules)}


def duration_rules(field: str, bound: str, message: str) -> dict[str, Any]:
    """CEL rules for a duration field: its format, then ``bound`` on ``duration(self)``.

    ``bound`` is skipped for a malformed value, so that value reports only the format
    message and not also a failed ``duration()`` call.
    """
    pattern = f"self.matches({cel_string(DURATION_PATTERN)})"
    return cel_rules(
        cel(
            pattern,
            f"{field} must be a duration: {DURATION_FORMAT_HINT}",
        ),
        cel(f"!{pattern} || ({bound})", message),
    )


class ApiModel(BaseModel):
    """Base for API objects: camelCase on the wire, snake_case in Python.

    Unknown fields are ignored rather than rejected: the API server already prunes them,
    and an operator older than its CRD must still read newer objects.
    """

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="ignore",
        frozen=True,
        use_attribute_docstrings=False,
    )


def is_quantity_cel(expression: str) -> str:
    """CEL: whether the string ``expression`` is a quantity, the pattern tried first.

    Never call ``isQuantity``/``quantity`` on a string the pattern has not passed: the API
    server's parser takes about a minute for ``1e-99999999``, and comparing ``1e99999999``
    as long (it computes the power of ten), so one object could hold an API server's CPU.
    The pattern allows three exponent digits; CEL's ``&&`` stops at the first false.
    """
    return f"({expression}.matches({cel_string(QUANTITY_PATTERN)}) && isQuantity({expression}))"


def int_or_quantity_cel(expression: str) -> str:
    """CEL: whether the int-or-string ``expression`` is a quantity (an int, or a string
    :func:`is_quantity_cel` passes); unparenthesised."""
    return f"type({expression}) == int || {is_quantity_cel(expression)}"


#: A quantity's format, as a CEL rule rather than a schema pattern (whose error shows only
#: the regex); a field with rules of its own lists this one first. The pattern is the
#: grammar; ``isQuantity`` is Kubernetes' own parser agreeing with it.
QUANTITY_RULE = cel(
    int_or_quantity_cel("self"),
    "must be a Kubernetes quantity: a number with an optional unit, e.g. 500m, 2, 1.5Gi or 4Gi",
)
_LIMIT = f"quantity('{QUANTITY_LIMIT}')"
_LIMIT_TEXT = f"less than {QUANTITY_LIMIT}"


def quantity_range_rule(field: str = "a quantity", *, minimum: int = 0) -> dict[str, str]:
    """The CEL rule bounding a quantity: at least ``minimum`` (1 for a volume's size: a
    whole byte) and below :data:`QUANTITY_LIMIT`. A value that is no quantity is left to
    :data:`QUANTITY_RULE`."""
    rule = (
        f"type(self) == int ? (self >= {minimum} && self < {QUANTITY_LIMIT_VALUE}) : "
        f"(!{is_quantity_cel('self')} || (!quantity(self).isLessThan(quantity('{minimum}')) && "
        f"quantity(self).isLessThan({_LIMIT})))"
    )
    return cel(rule, _range_message(field, minimum))


def _range_message(field: str, minimum: int) -> str:
    floor = "0 or more" if minimum == 0 else f"at least {minimum}"
    return f"{field} must be {floor} and {_LIMIT_TEXT}"


#: The rules of every :data:`Quantity`: its format, then its range.
QUANTITY_RULES = (QUANTITY_RULE, quantity_range_rule())

Quantity = Annotated[
    int | str,
    Field(union_mode="left_to_right"),
    WithJsonSchema(
        {
            "x-kubernetes-int-or-string": True,
            "maxLength": QUANTITY_MAX_LENGTH,
        }
        | cel_rules(*QUANTITY_RULES)
    ),
]
"""A Kubernetes resource quantity such as ``500m``, ``2Gi`` or ``1``: not negative."""

_DECIMAL = Context(prec=120, Emax=10_000, Emin=-10_000)
_SUFFIXES: dict[str, Decimal] = {
    "": Decimal(1),
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "k": Decimal("1e3"),
    "M": Decimal("1e6"),
    "G": Decimal("1e9"),
    "T": Decimal("1e12"),
    "P": Decimal("1e15"),
    "E": Decimal("1e18"),
    **{f"{prefix}i": Decimal(2 ** (10 * power)) for power, prefix in enumerate("KMGTPE", 1)},
}
_NUMBER = re.compile(r"[+-]?[0-9.]+")
_NANO = Decimal("1e-9")
_NANO_EXPONENT = -9


def scaled_quantity(number: Decimal, scale: Decimal) -> Decimal:
    """``number`` times ``scale`` (a suffix's) as Kubernetes reads it: to the nano, a finer
    value rounded up, away from zero (``resource.ParseQuantity`` and CEL's ``quantity()``;
    ``0.9999999999`` is 1), so a value compares as the API server compares it."""
    value = _DECIMAL.multiply(number, scale)
    exponent = value.as_tuple().exponent
    if isinstance(exponent, int) and exponent < _NANO_EXPONENT:
        return value.quantize(_NANO, rounding=ROUND_UP, context=_DECIMAL)
    return value


def quantity_value(text: str) -> Decimal:
    """The value of a quantity matching :data:`QUANTITY_PATTERN` (else ``ValueError``), as
    Kubernetes reads it: to the nano (see :func:`scaled_quantity`)."""
    if len(text) > QUANTITY_MAX_LENGTH or not re.fullmatch(QUANTITY_PATTERN, text):
        raise ValueError(f"{text[:QUANTITY_MAX_LENGTH]!r} is not a Kubernetes quantity")
    number = _NUMBER.match(text)
    assert number is not None  # the pattern starts with one
    value, suffix = Decimal(number.group()), text[number.end() :]
    if suffix in _SUFFIXES:
        return scaled_quantity(value, _SUFFIXES[suffix])
    return scaled_quantity(value, Decimal(1).scaleb(int(suffix[1:])))  # an exponent: e3, E-2


def check_quantity(value: int | str, field: str = "a quantity", *, minimum: int = 0) -> Any:
    """Python's side of a quantity's rules (:data:`QUANTITY_RULE`, :func:`quantity_range_rule`):
    ``value`` unchanged, or ``ValueError``."""
    if isinstance(value, bool):
        raise ValueError(f"{field} must be a Kubernetes quantity, not a boolean")
    if isinstance(value, int):
        number = Decimal(value)
    else:
        try:
            number = quantity_value(value)
        except ValueError:
            raise ValueError(
                f"{field} must be a Kubernetes quantity: a number with an optional unit, "
                "e.g. 500m, 2, 1.5Gi or 4Gi"
            ) from None
    if not minimum <= number < QUANTITY_LIMIT_VALUE:
        raise ValueError(_range_message(field, minimum))
    return value


def check_pattern(value: str | None, pattern: str, message: str) -> str | None:
    """Python's side of a CEL ``self.matches(pattern)`` rule, so the model agrees with the CRD."""
    if value is not None and not re.fullmatch(pattern, value):
        raise ValueError(message)
    return value


def check_url(value: str | None, info: ValidationInfo, message: str) -> str | None:
    """Python's side of a URL field's rule (:data:`URL_PATTERN`); an object read back from
    the API server may hold any URL an older CRD admitted (:data:`STORED_URL_PATTERN`)."""
    return check_pattern(value, URL_PATTERN if storing(info) else STORED_URL_PATTERN, message)


def check_duration(value: timedelta | None, low: timedelta, high: timedelta, message: str) -> Any:
    """Python's side of a CEL duration range rule."""
    if value is not None and not low <= value <= high:
        raise ValueError(message)
    return value


def class_name_rule(field: str, kind: str) -> dict[str, str]:
    """The CEL rule that ``field`` names a ``kind`` (RuntimeClass, PriorityClass,
    StorageClass): a DNS subdomain, as the pod and PVC APIs require."""
    return cel(
        f"self.matches({cel_string(DNS_SUBDOMAIN_PATTERN)})", _class_name_message(field, kind)
    )


def check_class_name(value: str | None, field: str, kind: str) -> str | None:
    """Python's side of :func:`class_name_rule`."""
    return check_pattern(value, DNS_SUBDOMAIN_PATTERN, _class_name_message(field, kind))


def _class_name_message(field: str, kind: str) -> str:
    return (
        f"{field} must be a {kind} name: lowercase letters, digits, '-' and '.', starting "
        "and ending with a letter or digit"
    )
