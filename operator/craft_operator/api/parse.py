"""Turn a kopf body into a validated :class:`CraftSandbox`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from craft_operator.api.base import STORED
from craft_operator.api.models import CraftSandbox


class InvalidSandboxError(ValueError):
    """The object passed admission but does not fit the model (e.g. an older CRD is installed)."""


def describe_validation_error(error: ValidationError) -> str:
    """One line per problem, as ``spec.user.id: message``, without echoing input values."""
    problems = []
    for item in error.errors(include_input=False, include_url=False):
        location = ".".join(str(part) for part in item["loc"])
        message = str(item["msg"]).removeprefix("Value error, ")
        problems.append(f"{location}: {message}" if location else message)
    return "; ".join(problems)


def parse_sandbox(body: Mapping[str, Any]) -> CraftSandbox:
    """Validate a CraftSandbox body the API server stored; raise :class:`InvalidSandboxError`
    with a readable message."""
    try:
        return CraftSandbox.model_validate(dict(body), context=STORED)
    except ValidationError as exc:
        raise InvalidSandboxError(describe_validation_error(exc)) from None
