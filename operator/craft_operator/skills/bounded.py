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
  ``indent``) and ``~`` may not make one longer than a rendering may be, nor ``batch``
  and ``slice`` more pieces than that;
- ``%``, ``str.format``, ``|string`` and ``{{ value }}`` may not turn arguments or values
  into more text than that (sizes worked out from the values, before any text is made);
- ``lipsum``, a global that generates text in Python outside the template's own code, is
  not offered.

What a filter allocates in other ways is not bounded: the filters left are bounded by
their input.
"""

from __future__ import annotations

import functools
import re
import string
from collections.abc import Callable, Iterable
from typing import Any

import jinja2
from jinja2.compiler import CodeGenerator, Frame, optimizeconst
from jinja2.nodes import Concat
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

#: A ``%`` field, or ``%%`` (a literal percent sign, matched first so that what follows it
#: is not read as a field).
_PERCENT_FIELD = re.compile(r"%%|%(?:\([^)]*\))?[#0 +\-]*(\*|\d+)?(?:\.(\*|\d+))?")
_SEQUENCE = (str, list, tuple)


class _BoundedCodeGenerator(CodeGenerator):
    """Jinja's code generator, ``~`` going through ``BoundedEnvironment.concat_checked``."""

    @optimizeconst  # constants are folded as Jinja folds them
    def visit_Concat(self, node: Concat, frame: Frame) -> None:  # noqa: N802 (Jinja's name)
        """``a ~ b ~ ...``: its parts' length checked before they are joined."""
        self.write("environment.concat_checked((")
        for part in node.nodes:
            self.visit(part, frame)
            self.write(", ")
        self.write("))")


class BoundedEnvironment(ImmutableSandboxedEnvironment):
    """The immutable sandbox with the bounds of this module."""

    intercepted_binops = frozenset({"*", "**", "+", "%"})
    code_generator_class = _BoundedCodeGenerator

    @staticmethod
    def concat_checked(parts: Iterable[Any]) -> str:
        """``~``: the parts as strings, joined if the result is not too long."""
        parts = list(parts)
        _check_length(sum(text_size(part) for part in parts))
        return "".join(str(part) for part in parts)

    def __init__(self, **options: Any) -> None:
        # Each {{ value }} is checked before it is turned into text (a list, say).
        super().__init__(**options, finalize=_check_text)
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
            check_percent(left, right)
        return super().call_binop(context, operator, left, right)

    def wrap_str_format(self, value: Any) -> Any:
        """``str.format`` and ``format_map``, sandboxed, with their format and arguments
        checked."""
        wrapped = super().wrap_str_format(value)
        if wrapped is None:
            return None
        text = value.__self__
        fields = check_brace_format(text)

        @functools.wraps(wrapped)
        def checked(*args: Any, **kwargs: Any) -> Any:
            _check_length(len(text) + fields * text_size((args, kwargs)))
            return wrapped(*args, **kwargs)

        return checked


def text_size(value: Any) -> int:
    """About how many characters ``str(value)`` has, worked out without building it: a
    string, list, tuple or dict by its items (a template cannot build cycles: the sandbox is
    immutable), anything else by its ``str``."""
    if isinstance(value, str):
        return len(value)
    if isinstance(value, list | tuple):
        return 2 + sum(text_size(item) + 2 for item in value)
    if isinstance(value, dict):
        return 2 + sum(text_size(k) + text_size(v) + 4 for k, v in value.items())
    return len(str(value))


def _check_text(value: Any) -> Any:
    """``value``, if its text is not longer than a rendering may be."""
    _check_length(text_size(value))
    return value


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


def check_percent(text: str, arguments: Any) -> None:
    """Refuse a ``%`` format whose width or precision is above the bound or an argument's,
    or whose fields could each take in all of ``arguments`` and outgrow a rendering."""
    fields = 0
    for field in _PERCENT_FIELD.finditer(text):
        if field.group(0) == "%%":
            continue
        fields += 1
        _check_width(field.group(1), "width")
        _check_width(field.group(2), "precision")
    _check_length(len(text) + fields * text_size(arguments))


def check_brace_format(text: str) -> int:
    """Refuse a ``str.format`` format whose width or precision is above the bound or an
    argument's (a nested field); the number of its fields."""
    try:
        fields = list(string.Formatter().parse(text))
    except ValueError:
        return 0  # malformed: formatting it fails anyway
    for _, _, spec, _ in fields:
        if not spec:
            continue
        if "{" in spec:
            _check_width("*", "width")
        for number in re.findall(r"\d+", spec):
            _check_width(number, "width or precision")
    return sum(1 for _, name, _, _ in fields if name is not None)


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
    elif name == "translate":
        _check_length(len(text) * max([1, *(len(str(to)) for to in _table_values(args))]))
    elif name == "replace" and len(args) >= 2:
        _check_length(_replaced_length(text, *args[:3]))
    elif name == "join" and args:
        items = args[0]
        _check_length(sum(text_size(item) for item in items) + len(text) * (len(items) - 1))


def _table_values(args: tuple[Any, ...]) -> list[Any]:
    table = args[0] if args else None
    return list(table.values()) if isinstance(table, dict) else []


def _check_center(value: Any, width: Any = 80) -> None:
    if _is_int(width):
        _check_length(width)


def _check_indent(s: Any, width: Any = 4, *_: Any, **__: Any) -> None:
    lines = str(s).count("\n") + 1
    per_line = width if _is_int(width) else len(str(width))
    _check_length(len(str(s)) + lines * per_line)


def _check_replace(s: Any, old: Any, new: Any, count: Any = None) -> None:
    _check_length(_replaced_length(s, old, new, count))


def _check_join(items: list[Any], d: Any = "", attribute: Any = None) -> None:
    if attribute is None:
        _check_length(sum(text_size(item) for item in items) + len(str(d)) * (len(items) - 1))
    else:
        _check_length(len(str(d)) * max(0, len(items) - 1))


def _check_pieces(value: Any, pieces: Any, fill_with: Any = None) -> None:
    if _is_int(pieces):
        _check_length(pieces)


#: The filters checked before they run, each by its check (same arguments).
_FILTER_CHECKS: dict[str, Callable[..., None]] = {
    "center": _check_center,
    "indent": _check_indent,
    "replace": _check_replace,
    "join": _check_join,
    "batch": _check_pieces,
    "slice": _check_pieces,
    "format": lambda value, *args, **kwargs: check_percent(str(value), args or kwargs),
    "string": _check_text,
}


def _checked_filter(
    unchecked: Callable[..., Any], check: Callable[..., None]
) -> Callable[..., Any]:
    """``unchecked`` run after ``check``, which gets the same arguments but the context
    Jinja passes some filters first (their markers kept)."""
    passes_context = getattr(unchecked, "jinja_pass_arg", None) is not None

    @functools.wraps(unchecked)
    def checked(*args: Any, **kwargs: Any) -> Any:
        context, given = (args[:1], args[1:]) if passes_context else ((), args)
        if check is _check_join and given and isinstance(given[0], Iterable):
            given = (list(given[0]), *given[1:])  # counted, then joined
        check(*given, **kwargs)
        return unchecked(*context, *given, **kwargs)

    return checked
