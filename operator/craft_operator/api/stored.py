"""Whether an object is validated as new (about to be stored) or as read back.

A check that only keeps a new object storable or within today's admission rules (the lists'
size budgets, the caps on a duration's digits, printable-ASCII URLs) does not apply to an
object the API server already holds: it was admitted, perhaps by an older CRD, and the API
server's ratcheting keeps it valid while unchanged. An upgrade must not fail it.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationInfo

#: The validation context of an object read back from the API server.
STORED: dict[str, Any] = {"stored": True}


def storing(info: ValidationInfo) -> bool:
    """Whether the object validated is about to be stored (not read back: see ``STORED``)."""
    return not (info.context or {}).get("stored", False)
