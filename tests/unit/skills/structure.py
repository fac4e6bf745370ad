"""Read a rendered SKILL.md the way a Markdown renderer does (CommonMark, markdown-it-py)."""

from __future__ import annotations

import re

from markdown_it import MarkdownIt
from markdown_it.token import Token

_PARSER = MarkdownIt("commonmark")
_FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")


def tokens(text: str) -> list[Token]:
    """Block tokens of ``text``, with the front matter removed (CommonMark has none)."""
    lines = text.split("\n")
    end = lines.index("---", 1)
    return _PARSER.parse("\n".join(lines[end + 1 :]))


def _walk(items: list[Token]) -> list[Token]:
    found: list[Token] = []
    for token in items:
        found.append(token)
        found.extend(_walk(token.children or []))
    return found


def block_outline(text: str) -> list[tuple[str, str, int, str]]:
    """The document's block structure: (type, tag, level, markup) of every block token.

    Two renderings with the same outline have the same headings, lists, fences and
    paragraphs; only the words inside them may differ.
    """
    return [(t.type, t.tag, t.level, t.markup) for t in tokens(text)]


def html_tokens(text: str) -> list[str]:
    """Raw HTML a renderer would pass through, block or inline."""
    return [t.content for t in _walk(tokens(text)) if t.type in {"html_block", "html_inline"}]


def headings(text: str) -> list[str]:
    """The text of every heading, in order."""
    items = tokens(text)
    return [
        items[index + 1].content
        for index, token in enumerate(items)
        if token.type == "heading_open"
    ]


def list_items(text: str, heading: str) -> list[str]:
    """The text of the bullet items in the section under ``heading``."""
    items = tokens(text)
    inside = False
    found: list[str] = []
    for index, token in enumerate(items):
        if token.type == "heading_open":
            inside = items[index + 1].content == heading
        elif (
            inside
            and token.type == "inline"
            and items[index - 1].type == "paragraph_open"
            and items[index - 2].type == "list_item_open"
        ):
            found.append(token.content)
    return found


def documented_flags(text: str) -> set[str]:
    """Every ``--flag`` written in code (fenced blocks and inline code spans)."""
    code = [
        t.content for t in _walk(tokens(text)) if t.type in {"fence", "code_block", "code_inline"}
    ]
    return {flag for snippet in code for flag in _FLAG.findall(snippet)}
