"""The CraftSandbox status between its wire form (camelCase JSON) and its typed model.

Parsing never fails: a stored status written by another version of the operator may hold
fields this one does not know (ignored, and never touched by a patch) or values it cannot
read (set aside, so the next status patch removes them).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from craft_operator.api.models import Condition, CraftSandboxStatus


def parse_status(raw: object) -> tuple[CraftSandboxStatus, dict[str, Any]]:
    """The typed status in ``raw``, and the top-level fields left out as invalid."""
    data = dict(raw) if isinstance(raw, Mapping) else {}
    invalid: dict[str, Any] = {}
    conditions = data.get("conditions")
    if isinstance(conditions, list):
        # One unreadable condition costs only itself, not every other one.
        readable = [item for item in conditions if _readable_condition(item)]
        if len(readable) != len(conditions):
            invalid["conditions"] = conditions
            data["conditions"] = readable
    while True:
        try:
            return CraftSandboxStatus.model_validate(data), invalid
        except ValidationError as exc:
            bad = {str(error["loc"][0]) for error in exc.errors() if error["loc"]} & set(data)
            if not bad:  # cannot tell which field is wrong: start from an empty status
                return CraftSandboxStatus(), {**invalid, **data}
            for key in bad:
                invalid[key] = data.pop(key)


def _readable_condition(item: object) -> bool:
    try:
        Condition.model_validate(item)
    except ValidationError:
        return False
    return True


def dump_status(status: CraftSandboxStatus) -> dict[str, Any]:
    """The status as the API stores it: camelCase, no nulls, no empty condition list."""
    dumped = status.model_dump(by_alias=True, mode="json", exclude_none=True)
    if not dumped.get("conditions"):
        dumped.pop("conditions", None)
    return dumped
