"""Make untrusted text safe to place inside one line of the rendered SKILL.md.

Source descriptions and scopes come from the CraftSandbox API, so they are untrusted: they
must not be able to change the document's structure. The rules, applied in this order:

1. Control characters become spaces; invisible characters (Unicode's default-ignorable
   code points: zero-width spaces, bidirectional overrides, byte-order marks, variation
   selectors, tags, Hangul fillers), other format characters, surrogates, private-use
   and unassigned code points are removed.
2. Every run of whitespace, including newlines, ``\\r``, tabs and the Unicode line and
   paragraph separators (U+2028, U+2029), becomes one space: a value is always one line.
3. Runs of three or more of ``-``, ``=``, `````` ` `````` or ``~`` are cut to two, so no
   front-matter fence, thematic break or code fence survives.
4. The text is capped at a length; a cut is marked with ``…``. Only the first few times
   that length of raw text is read at all, which bounds the work hostile input can cause.
5. ``<`` is backslash-escaped, so no HTML tag or comment survives. This is the Markdown
   escape, which renders as a plain ``<``; HTML entities (``&lt;``) would garble the text
   for an agent that reads the file raw.
6. A value that would open a Markdown block if a template placed it at the start of a
   line (``# heading``, ``> quote``, ``- item``, ``1. item``, a setext underline, a
   thematic break, spaced or not) gets
   that marker escaped. Only real block openers are escaped: ``#eng`` is not a heading
   and stays as it is. Trailing backslashes are dropped, before the marker is judged, so
   a value cannot escape whatever the template puts after it (nor leave a bare ``#``).

Inline Markdown (emphasis, code spans, links) is left alone: it cannot leave its line.
"""

from __future__ import annotations

import re
import unicodedata

#: Longest description, in characters, before it is cut.
MAX_DESCRIPTION_CHARS = 300
#: Longest scope example, in characters, before it is cut.
MAX_SCOPE_CHARS = 80
#: Longest source name kept.
MAX_NAME_CHARS = 64

ELLIPSIS = "…"

# How much raw text per output character is read before the rest is ignored.
_RAW_FACTOR = 4

_DROPPED_CATEGORIES = frozenset({"Cf", "Cs", "Co", "Cn"})
_NOT_PRINTABLE_ASCII = re.compile(r"[^\x20-\x7e]+")
# Unicode's Default_Ignorable_Code_Point: code points a renderer shows as nothing, among
# them some that Python counts as printable (variation selectors, which can spell out any
# bytes unseen, the combining grapheme joiner, the Hangul fillers). Python's unicodedata
# lacks the property; these ranges are copied from the Unicode Character Database's
# DerivedCoreProperties.txt (Unicode 14.0).
_DEFAULT_IGNORABLE: tuple[tuple[int, int], ...] = (
    (0x00AD, 0x00AD),
    (0x034F, 0x034F),
    (0x061C, 0x061C),
    (0x115F, 0x1160),
    (0x17B4, 0x17B5),
    (0x180B, 0x180F),
    (0x200B, 0x200F),
    (0x202A, 0x202E),
    (0x2060, 0x206F),
    (0x3164, 0x3164),
    (0xFE00, 0xFE0F),
    (0xFEFF, 0xFEFF),
    (0xFFA0, 0xFFA0),
    (0xFFF0, 0xFFF8),
    (0x1BCA0, 0x1BCA3),
    (0x1D173, 0x1D17A),
    (0xE0000, 0xE0FFF),
)
_COMMON_INVISIBLE: dict[int, str | None] = {
    **dict.fromkeys([*range(0x00, 0x20), *range(0x7F, 0xA0), 0x2028, 0x2029], " "),
    **dict.fromkeys(
        (code for first, last in _DEFAULT_IGNORABLE for code in range(first, last + 1)), None
    ),
}
_BACKSLASHES_BEFORE_LT = re.compile(r"\\+(?=<)")
# Headings, quotes, list items, setext underlines, thematic breaks, link reference
# definitions and table rows: what a value at the start of a template's line could begin.
# A thematic break may be spaced ("_ _ _", "-- -"): whitespace is single spaces by now.
_BLOCK_START = re.compile(
    r"^(?:#{1,6}(?= |$)|>|[-+*](?= |$)|\d{1,9}(?=[.)]( |$))|[-=]+$|[*_]{3,}"
    r"|(?P<rule>[-*_])(?: ?(?P=rule)){2,}$|\[|\|)"
)
_NOT_IDENTIFIER = re.compile(r"[^A-Za-z0-9_.-]+")


def _replace_invisible(match: re.Match[str]) -> str:
    kept: list[str] = []
    for char in match.group(0):
        category = unicodedata.category(char)
        if category == "Cc":
            kept.append(" ")
        elif category not in _DROPPED_CATEGORIES:
            kept.append(char)
    return "".join(kept)


def _strip_invisible(text: str) -> str:
    # The common cases go through one translate(); only text that still holds something
    # non-printable is looked up character by character (outside printable ASCII).
    text = text.translate(_COMMON_INVISIBLE)
    if text.isprintable():
        return text
    return _NOT_PRINTABLE_ASCII.sub(_replace_invisible, text)


def _cut_fence_runs(text: str) -> str:
    for char in "-=`~":
        triple, double = char * 3, char * 2
        while triple in text:
            text = text.replace(triple, double)
    return text


def _cap(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return text[: max(limit - 1, 0)].rstrip() + ELLIPSIS


def _escape_block_start(text: str) -> str:
    match = _BLOCK_START.match(text)
    if match is None:
        return text
    if match.group(0).isdigit():
        # "1. item" / "1) item": escape the punctuation after the number.
        end = match.end()
        return text[:end] + "\\" + text[end:]
    return "\\" + text


def inline_text(value: str, *, limit: int) -> str:
    """Reduce untrusted ``value`` to one line of inert Markdown of at most about ``limit`` chars.

    The result may be empty (for a value that was only whitespace or control characters).
    Escapes may add a few characters beyond ``limit``; the visible text never exceeds it.
    """
    # Only a bounded prefix can reach the output: whitespace runs shrink, but not forever.
    text = " ".join(_strip_invisible(value[: limit * _RAW_FACTOR + 64]).split())
    text = _cut_fence_runs(text)
    text = _cap(text, limit)
    text = _BACKSLASHES_BEFORE_LT.sub("", text)
    text = text.replace("<", "\\<")
    # A trailing backslash would escape whatever a template puts right after the value.
    # (Whitespace is single spaces by now.) Dropped before the block start is judged:
    # ``#\\`` opens no heading, but the ``#`` it leaves does.
    return _escape_block_start(text.rstrip(" \\"))


def identifier_text(name: str) -> str:
    """Reduce a source name to the characters an identifier may hold (safe in a code span).

    Valid identifiers (``google_drive``) pass unchanged; anything else keeps only letters,
    digits, ``_``, ``.`` and ``-``, and may come back empty.
    """
    return _NOT_IDENTIFIER.sub("", name)[:MAX_NAME_CHARS]
