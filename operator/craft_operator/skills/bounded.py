"""The Jinja2 sandbox the skill's templates run in, with bounds on what a template may build.

A custom template is the platform's configuration, trusted, but a mistake in it must not
hold or exhaust the operator. Work done in C holds the interpreter where no CPU budget can
stop it, so what a template may build in one step is checked before it is built:

- ``*`` and ``+`` may not make a string or list longer than a rendering may be, nor ``*``
  and ``**`` a number of more than :data:`MAX_NUMBER_BITS` bits;
- ``%``, ``str.format`` and the ``format`` filter may not pad or cut to a width or
  precision above :data:`MAX_FORMAT_WIDTH`, nor take one from an argument;
- the string methods and filters whose result may be far longer than their input
  (``ljust``, ``rjust``, ``center``, ``zfill``, ``expandtabs``, ``replace``, ``join``,
  ``indent``) may not make one longer than a rendering may be;
- ``lipsum``, a global that generates text in Python outside the template's own code, is
  not offered.

Not bounded: a string concatenated with itself (``~``) in a loop, which doubles it at each
turn (the CPU budget ends such a loop, perhaps after a few hundred megabytes).
"""

from __future__ import annotations

import functools
import re
import string
from collections.abc import Callable, Iterable
from typing import Any

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment

from craft_operator.skills.errors import SkillTemplateError

#: Largest rendering accepted (a ConfigMap holds at most 1 MiB).
MAX_RENDERED_CHARS = 256 * 1024
#: Largest number a template may compute.
MAX_NUMBER_BITS = 4096
#: Largest width or precision a format may pad or cut to.
MAX_FORMAT_WIDTH = 1024
#: The skill's name, in every message.
SKILL_NAME = "company-search"

_PERCENT_FIELD = re.compile(r"%(?:\([^)]*\))?[#0 +\-]*(\*|\d+)?(?:\.(\*|\d+))?")
_SEQUENCE = (str, list, tuple)


class BoundedEnvironment(ImmutableSandboxedEnvironment):
    """The immutable sandbox with the bounds of this module."""

    intercepted_binops = frozenset({"*", "**", "+", "%"})

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.globals.pop("lipsum", None)
        for name, check in _FILTER_CHECKS.items():
            self.filters[name] = _checked_filter(self.filters[name], check)

    def call(self, context: jinja2.runtime.Context, obj: Any, /, *args: Any, **kwargs: Any) -> Any:
        """Call ``obj`` from the template; a string method that may build a far longer
        string is checked first."""
        owner = getattr(obj, "__self__", None)
        if isinstance(owner, str):
            name = getattr(obj, "__name__", "")
            if name == "join" and args:
                args = (list(args[0]), *args[1:])  # counted, then joined
            _check_str_method(owner, name, args, kwargs)
        return super().call(context, obj, *args, **kwargs)

    def call_binop(
        self, context: jinja2.runtime.Context, operator: str, left: Any, right: Any
    ) -> Any:
        """Refuse an operation whose result would be huge, before it is computed."""
        if operator == "**":
            _check_power(left, right)
        elif operator == "*":
            _check_product(left, right)
        elif operator == "+":
            _check_sum(left, right)
        elif isinstance(left, str):
            check_percent_format(left)
        return super().call_binop(context, operator, left, right)

    def wrap_str_format(self, value: Any) -> Any:
        """``str.format`` and ``format_map``, sandboxed, with their format checked."""
        wrapped = super().wrap_str_format(value)
        if wrapped is not None:
            check_brace_format(value.__self__)
        return wrapped


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _too_many_bits() -> SkillTemplateError:
    return SkillTemplateError(
        f"{SKILL_NAME} template computes a number of more than {MAX_NUMBER_BITS} bits"
    )


def _too_long() -> SkillTemplateError:
    return SkillTemplateError(
        f"{SKILL_NAME} template builds a string or list of more than {MAX_RENDERED_CHARS} items"
    )


def _check_power(base: Any, exponent: Any) -> None:
    if not (_is_int(base) and _is_int(exponent) and exponent > 0 and abs(base) > 1):
        return
    if abs(base).bit_length() * exponent > MAX_NUMBER_BITS:
        raise _too_many_bits()


def _check_product(left: Any, right: Any) -> None:
    if _is_int(left) and _is_int(right):
        if left.bit_length() + right.bit_length() > MAX_NUMBER_BITS:
            raise _too_many_bits()
        return
    for sequence, times in ((left, right), (right, left)):
        repeated = isinstance(sequence, _SEQUENCE) and _is_int(times)
        if repeated and len(sequence) * times > MAX_RENDERED_CHARS:
            raise _too_long()


def _check_sum(left: Any, right: Any) -> None:
    joined = isinstance(left, _SEQUENCE) and isinstance(right, _SEQUENCE)
    if joined and len(left) + len(right) > MAX_RENDERED_CHARS:
        raise _too_long()


def _check_width(number: str | None, kind: str) -> None:
    if number == "*":
        raise SkillTemplateError(
            f"{SKILL_NAME} template takes a {kind} from an argument in a format"
        )
    if number is not None and int(number) > MAX_FORMAT_WIDTH:
        raise SkillTemplateError(
            f"{SKILL_NAME} template formats to a {kind} of {number}, more than {MAX_FORMAT_WIDTH}"
        )


def check_percent_format(text: str) -> None:
    """Refuse a ``%`` format whose width or precision is above the bound or an argument's."""
    for field in _PERCENT_FIELD.finditer(text):
        _check_width(field.group(1), "width")
        _check_width(field.group(2), "precision")


def check_brace_format(text: str) -> None:
    """Refuse a ``str.format`` format whose width or precision is above the bound or an
    argument's (a nested field)."""
    try:
        fields = list(string.Formatter().parse(text))
    except ValueError:
        return  # malformed: formatting it fails anyway
    for _, _, spec, _ in fields:
        if not spec:
            continue
        if "{" in spec:
            _check_width("*", "width")
        for number in re.findall(r"\d+", spec):
            _check_width(number, "width or precision")


def _check_length(length: int) -> None:
    if length > MAX_RENDERED_CHARS:
        raise _too_long()


def _replaced_length(text: Any, old: Any, new: Any, count: Any = None) -> int:
    text, old, new = str(text), str(old), str(new)
    times = text.count(old) if old else len(text) + 1
    if _is_int(count) and count >= 0:
        times = min(times, count)
    return len(text) + times * max(0, len(new) - len(old))


def _width(args: tuple[Any, ...], kwargs: dict[str, Any], name: str, default: Any) -> Any:
    return args[0] if args else kwargs.get(name, default)


def _check_str_method(text: str, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    if name in ("ljust", "rjust", "center", "zfill"):
        width = _width(args, kwargs, "width", 0)
        if _is_int(width):
            _check_length(width)
    elif name == "expandtabs":
        tabsize = _width(args, kwargs, "tabsize", 8)
        if _is_int(tabsize):
            _check_length(len(text) + text.count("\t") * tabsize)
    elif name == "replace" and len(args) >= 2:
        _check_length(_replaced_length(text, *args[:3]))
    elif name == "join" and args:
        _check_length(len(text) * max(0, len(args[0]) - 1))


def _check_center(value: Any, width: Any = 80) -> None:
    if _is_int(width):
        _check_length(width)


def _check_indent(s: Any, width: Any = 4, *_: Any, **__: Any) -> None:
    lines = str(s).count("\n") + 1
    per_line = width if _is_int(width) else len(str(width))
    _check_length(len(str(s)) + lines * per_line)


def _check_replace(_context: Any, s: Any, old: Any, new: Any, count: Any = None) -> None:
    _check_length(_replaced_length(s, old, new, count))


def _check_join(_context: Any, items: list[Any], d: Any = "", attribute: Any = None) -> None:
    _check_length(len(str(d)) * max(0, len(items) - 1))


#: The filters checked before they run, each by its check (same arguments).
_FILTER_CHECKS: dict[str, Callable[..., None]] = {
    "center": _check_center,
    "indent": _check_indent,
    "replace": _check_replace,
    "join": _check_join,
    "format": lambda value, *_, **__: check_percent_format(str(value)),
}


def _checked_filter(
    unchecked: Callable[..., Any], check: Callable[..., None]
) -> Callable[..., Any]:
    """``unchecked`` run after ``check`` (Jinja's markers of what it passes first kept)."""

    @functools.wraps(unchecked)
    def checked(*args: Any, **kwargs: Any) -> Any:
        if check is _check_join and len(args) >= 2 and isinstance(args[1], Iterable):
            args = (args[0], list(args[1]), *args[2:])  # counted, then joined
        check(*args, **kwargs)
        return unchecked(*args, **kwargs)

    return checked
