"""Turn a kopf body into a validated :class:`CraftSandbox`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from craft_operator.api.base import STORED
from craft_operator.api.models import CraftSandbox
from craft_operator.api.status_codec import parse_status


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
    with a readable message.

    Only the spec (and metadata) can make it invalid: the status is read leniently, as
    :func:`~craft_operator.api.status_codec.parse_status` reads it, a field this operator
    cannot read left out. Another version of the operator, or anyone allowed to write the
    status, may store one the CRD admits (any ``date-time``) and the model does not.
    """
    status, _ = parse_status(body.get("status"))
    try:
        sandbox = CraftSandbox.model_validate({**body, "status": {}}, context=STORED)
    except ValidationError as exc:
        raise InvalidSandboxError(describe_validation_error(exc)) from None
    return sandbox.model_copy(update={"status": status})
