"""Make untrusted text safe to place inside one line of the rendered SKILL.md.

Source descriptions and scopes come from the CraftSandbox API, so they are untrusted: they
must not be able to change the document's structure. The rules, applied in this order:

1. Control characters become spaces; invisible format characters (zero-width spaces,
   bidirectional overrides, byte-order marks), surrogates, private-use and unassigned code
   points are removed.
2. Every run of whitespace, including newlines, ``\\r``, tabs and the Unicode line and
   paragraph separators (U+2028, U+2029), becomes one space: a value is always one line.
3. Runs of three or more of ``-``, ``=``, `````` ` `````` or ``~`` are cut to two, so no
   front-matter fence, thematic break or code fence survives.
4. The text is capped at a length; a cut is marked with ``…``.
5. ``<`` is backslash-escaped, so no HTML tag or comment survives. This is the Markdown
   escape, which renders as a plain ``<``; HTML entities (``&lt;``) would garble the text
   for an agent that reads the file raw.
6. A value that would open a Markdown block if a template placed it at the start of a
   line (``# heading``, ``> quote``, ``- item``, ``1. item``, a setext underline) gets
   that marker escaped. Only real block openers are escaped: ``#eng`` is not a heading
   and stays as it is. Trailing backslashes are dropped so a value cannot escape
   whatever the template puts after it.

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

_DROPPED_CATEGORIES = frozenset({"Cf", "Cs", "Co", "Cn"})
_FENCE_RUN = re.compile(r"([-=`~])\1{2,}")
_BACKSLASHES_BEFORE_LT = re.compile(r"\\+(?=<)")
_BLOCK_START = re.compile(r"^(?:#{1,6}(?= |$)|>|[-+*](?= |$)|\d{1,9}(?=[.)]( |$))|[-=]+$)")
_NOT_IDENTIFIER = re.compile(r"[^A-Za-z0-9_.-]+")


def _strip_invisible(text: str) -> str:
    kept: list[str] = []
    for char in text:
        category = unicodedata.category(char)
        if category == "Cc":
            kept.append(" ")
        elif category not in _DROPPED_CATEGORIES:
            kept.append(char)
    return "".join(kept)


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
    text = " ".join(_strip_invisible(value).split())
    text = _FENCE_RUN.sub(lambda match: match.group(1) * 2, text)
    text = _cap(text, limit)
    text = _BACKSLASHES_BEFORE_LT.sub("", text)
    text = text.replace("<", "\\<")
    text = _escape_block_start(text)
    return text.rstrip("\\").rstrip()


def identifier_text(name: str) -> str:
    """Reduce a source name to the characters an identifier may hold (safe in a code span).

    Valid identifiers (``google_drive``) pass unchanged; anything else keeps only letters,
    digits, ``_``, ``.`` and ``-``, and may come back empty.
    """
    return _NOT_IDENTIFIER.sub("", name)[:MAX_NAME_CHARS]
