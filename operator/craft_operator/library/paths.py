"""Turning S3 keys into safe relative paths, and matching excludes and disabled paths.

Rules (each rejection is reported with a :class:`SkipReason`, never written):

- The part of the key after the prefix is the relative path. Keys ending in ``/`` are
  folder markers and are ignored.
- Normalisation: Unicode NFC, and runs of ``/`` collapse to one (``a//b`` is ``a/b``).
  Two keys with the same normal form collide; the key already in normal form wins, and if
  none is, all of them are skipped. Case is significant (the sandbox filesystem is
  case-sensitive), so ``A.txt`` and ``a.txt`` are two files.
- Rejected: a leading ``/`` (absolute), ``.`` or ``..`` segments, control characters
  (C0, DEL, C1, including NUL), backslashes (an ambiguous separator), text that is not valid
  UTF-8, a segment over 255 bytes or a path over :data:`MAX_PATH_BYTES` bytes, the
  operator's own state directory :data:`STATE_DIR`, a file where another key needs a
  directory, and anything that would not land inside the destination.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Sequence
from enum import StrEnum
from functools import lru_cache
from posixpath import normpath
from typing import Any

import re2

#: Longest path segment (a file or directory name) in bytes: Linux NAME_MAX.
MAX_SEGMENT_BYTES = 255
#: Longest relative path in bytes. Linux PATH_MAX is 4096 including the final NUL; this
#: leaves 255 bytes for the destination root and the staging directory in front of it.
MAX_PATH_BYTES = 4096 - 1 - 255
#: The operator's state directory inside the library root (manifest, staging area).
STATE_DIR = ".craft-sync"

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


class SkipReason(StrEnum):
    """Why a key was not synced."""

    ABSOLUTE = "absolute path"
    DOT_SEGMENT = "'.' or '..' segment"
    CONTROL_CHARACTER = "control character"
    BACKSLASH = "backslash in key"
    INVALID_UNICODE = "not valid UTF-8"
    SEGMENT_TOO_LONG = "name longer than 255 bytes"
    PATH_TOO_LONG = f"path longer than {MAX_PATH_BYTES} bytes"
    RESERVED = f"reserved name {STATE_DIR}"
    COLLISION = "collides with another key after normalisation"
    FILE_DIRECTORY_CONFLICT = "is a file where another key needs a directory"
    OUTSIDE_DESTINATION = "outside the library prefix"
    INVALID_ETAG = "ETag unusable in the manifest"


class UnsafePathError(ValueError):
    """A relative path is not safe to write; ``reason`` says why."""

    def __init__(self, reason: SkipReason) -> None:
        super().__init__(reason.value)
        self.reason = reason


def normalise_prefix(prefix: str) -> str:
    """The prefix with exactly one trailing ``/`` (empty stays empty: the whole bucket)."""
    stripped = prefix.strip("/")
    return f"{stripped}/" if stripped else ""


def normalise_path(relative: str) -> str:
    """Check ``relative`` and return its normal form, or raise :class:`UnsafePathError`."""
    if relative.startswith("/"):
        raise UnsafePathError(SkipReason.ABSOLUTE)
    if _CONTROL.search(relative):
        raise UnsafePathError(SkipReason.CONTROL_CHARACTER)
    if "\\" in relative:
        raise UnsafePathError(SkipReason.BACKSLASH)
    try:
        relative.encode("utf-8")
    except UnicodeEncodeError:
        raise UnsafePathError(SkipReason.INVALID_UNICODE) from None
    normal = unicodedata.normalize("NFC", relative)
    segments = [segment for segment in normal.split("/") if segment]
    if not segments:
        raise UnsafePathError(SkipReason.DOT_SEGMENT)
    if any(segment in (".", "..") for segment in segments):
        raise UnsafePathError(SkipReason.DOT_SEGMENT)
    if any(len(segment.encode()) > MAX_SEGMENT_BYTES for segment in segments):
        raise UnsafePathError(SkipReason.SEGMENT_TOO_LONG)
    path = "/".join(segments)
    if len(path.encode()) > MAX_PATH_BYTES:
        raise UnsafePathError(SkipReason.PATH_TOO_LONG)
    if segments[0] == STATE_DIR:
        raise UnsafePathError(SkipReason.RESERVED)
    # Defence in depth: after the checks above this cannot escape, and must not.
    if normpath(path) != path or path.startswith("../"):
        raise UnsafePathError(SkipReason.OUTSIDE_DESTINATION)
    return path


def is_normal_path(path: str) -> bool:
    """True if ``path`` is safe and already in normal form (as manifests must store it)."""
    try:
        return normalise_path(path) == path
    except UnsafePathError:
        return False


def ancestors(path: str) -> Iterable[str]:
    """The directories above ``path``, nearest last: ``a/b/c`` gives ``a``, ``a/b``."""
    segments = path.split("/")
    for end in range(1, len(segments)):
        yield "/".join(segments[:end])


class InvalidGlobError(ValueError):
    """An exclude glob that cannot be compiled (e.g. a reversed range ``[z-a]``)."""


def _re2_options() -> Any:
    options = re2.Options()
    options.log_errors = False  # an invalid glob is reported as InvalidGlobError, once
    options.never_capture = True
    return options


_RE2_OPTIONS = _re2_options()


@lru_cache(maxsize=512)
def _glob_regex(pattern: str) -> tuple[Any, bool, bool]:
    """Compile one exclude glob: (regex, anchored at the root, matches directories only).

    RE2, not :mod:`re`: the spec's writer chooses the globs, and with backtracking
    ``*a*a*a*a*b`` took 15 s on one 255-character name (each further ``*`` multiplies it);
    RE2 matches in time linear in the name.
    """
    directory_only = pattern.endswith("/")
    body = unicodedata.normalize("NFC", pattern.strip("/"))
    anchored = pattern.startswith("/") or "/" in body
    out: list[str] = []
    index = 0
    while index < len(body):
        char = body[index]
        if body.startswith("**/", index):
            out.append("(?:[^/]+/)*")
            index += 3
        elif body.startswith("**", index):
            out.append(".*")
            index += 2
        elif char == "*":
            out.append("[^/]*")
            index += 1
        elif char == "?":
            out.append("[^/]")
            index += 1
        elif char == "[":
            # A "]" first in the class (after a "!") is one of its characters.
            first = index + (2 if body.startswith("!", index + 1) else 1)
            end = body.find("]", first + 1)
            if end == -1:
                out.append(re.escape(char))
                index += 1
            else:
                inner = body[index + 1 : end]
                if inner.startswith("!"):
                    inner = "^" + inner[1:]
                # "[" escaped: RE2 would read "[:alpha:]" inside as a POSIX class.
                out.append("[" + inner.replace("\\", "\\\\").replace("[", "\\[") + "]")
                index = end + 1
        else:
            out.append(re.escape(char))
            index += 1
    try:
        regex = re2.compile("(?s)" + "".join(out) + r"\z", _RE2_OPTIONS)
    except re2.error as exc:
        raise InvalidGlobError(f"exclude glob {pattern!r} is invalid: {exc}") from None
    return regex, anchored, directory_only


def check_globs(patterns: Iterable[str]) -> None:
    """Raise :class:`InvalidGlobError` for the first exclude glob that cannot be compiled."""
    for pattern in patterns:
        _glob_regex(pattern)


def glob_matches(pattern: str, path: str) -> bool:
    """True if the exclude glob ``pattern`` covers ``path`` (a normalised relative path).

    Globs follow .gitignore conventions: ``*`` and ``?`` stay within one name, ``**``
    crosses directories, a pattern without a ``/`` matches a name at any depth, a pattern
    with one is anchored at the library root, a trailing ``/`` matches only directories,
    and a matched directory covers everything beneath it.
    """
    regex, anchored, directory_only = _glob_regex(pattern)
    segments = path.split("/")
    candidates: list[str]
    if anchored:
        candidates = list(ancestors(path))
        if not directory_only:
            candidates.append(path)
    else:
        candidates = segments[:-1] if directory_only else segments
    return any(regex.match(candidate) for candidate in candidates)


def normalise_disabled(paths: Iterable[str]) -> frozenset[str]:
    """Disabled paths in normal form (``/a/b/`` is ``a/b``); unsafe entries match nothing."""
    result: set[str] = set()
    for path in paths:
        try:
            result.add(normalise_path(path.strip("/")))
        except UnsafePathError:
            continue
    return frozenset(result)


def is_disabled(path: str, disabled: frozenset[str]) -> bool:
    """True if ``path`` or one of its directories is a disabled path."""
    if not disabled:
        return False
    return path in disabled or any(parent in disabled for parent in ancestors(path))


def is_excluded(path: str, excludes: Sequence[str]) -> bool:
    """True if any exclude glob covers ``path``."""
    return any(glob_matches(pattern, path) for pattern in excludes)
