"""The base of every API model and the helpers that write its admission rules.

A field's rule is written twice: as a CEL rule in the schema (``x-kubernetes-validations``,
with a message for people), enforced by the API server, and as a pydantic validator
(``check_*``), so that the models agree with the CRD on what is valid.
"""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema
from pydantic.alias_generators import to_camel

from craft_operator.api.constants import QUANTITY_MAX_LENGTH, QUANTITY_PATTERN
from craft_operator.api.durations import DURATION_PATTERN


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
            f"{field} must be a duration: a number and a unit, e.g. 30m, 1h or 720h "
            "(units: ns, us, ms, s, m, h)",
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


#: A quantity's format, as a CEL rule rather than a schema pattern (whose error shows only
#: the regex); a field with rules of its own lists this one first.
QUANTITY_RULE = cel(
    f"type(self) == int || self.matches({cel_string(QUANTITY_PATTERN)})",
    "must be a Kubernetes quantity: a number with an optional unit, e.g. 500m, 2, 1.5Gi or 4Gi",
)

Quantity = Annotated[
    int | str,
    Field(union_mode="left_to_right"),
    WithJsonSchema(
        {
            "x-kubernetes-int-or-string": True,
            "maxLength": QUANTITY_MAX_LENGTH,
        }
        | cel_rules(QUANTITY_RULE)
    ),
]
"""A Kubernetes resource quantity such as ``500m``, ``2Gi`` or ``1``."""


def check_quantity(value: int | str) -> int | str:
    """Python's side of the :data:`Quantity` rule: ``value`` unchanged, or ``ValueError``."""
    if isinstance(value, str) and (
        len(value) > QUANTITY_MAX_LENGTH or not re.match(QUANTITY_PATTERN, value)
    ):
        raise ValueError(f"{value!r} is not a Kubernetes quantity (e.g. 500m, 2, 4Gi)")
    return value


def check_pattern(value: str | None, pattern: str, message: str) -> str | None:
    """Python's side of a CEL ``self.matches(pattern)`` rule, so the model agrees with the CRD."""
    if value is not None and not re.match(pattern, value):
        raise ValueError(message)
    return value


def check_duration(value: timedelta | None, low: timedelta, high: timedelta, message: str) -> Any:
    """Python's side of a CEL duration range rule."""
    if value is not None and not low <= value <= high:
        raise ValueError(message)
    return value
