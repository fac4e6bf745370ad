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
from collections.abc import Iterable
from dataclasses import dataclass
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
    ARCHIVED = "archived: restore the object to sync it"


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


class CostlyGlobsError(InvalidGlobError):
    """Exclude globs whose matching against a library took more CPU than it may."""


#: The memory each compiled glob may use (RE2's default is 8 MiB). Its automaton is built
#: lazily as names are matched, and a glob that never matches long names (``*a???...c``)
#: fills it; the regexes are cached, so hostile globs in specs would hold hundreds of MiB
#: for the process's life. Past this, RE2 matches with its slower automaton: still linear.
MAX_GLOB_MEMORY = 512 * 1024


def _re2_options() -> Any:
    options = re2.Options()
    options.log_errors = False  # an invalid glob is reported as InvalidGlobError, once
    options.never_capture = True
    options.max_mem = MAX_GLOB_MEMORY
    return options


_RE2_OPTIONS = _re2_options()
_SLASH = ord("/")
#: A class of no character: what a class of nothing but ``/`` matches.
_NOTHING = r"[^\x{0}-\x{10FFFF}]"


@dataclass(frozen=True)
class _Glob:
    """One exclude glob translated for RE2: its ``source`` (unanchored), whether it is
    anchored at the library root, whether it matches directories only, and its longest
    ``literal`` run of plain characters (in every path it covers)."""

    source: str
    anchored: bool
    directory_only: bool
    literal: str


@lru_cache(maxsize=512)
def _translate(pattern: str) -> _Glob:
    """Translate one exclude glob, or raise :class:`InvalidGlobError`."""
    if "\x00" in pattern:  # no path holds one, and no argv can carry one (a sync Job's)
        raise InvalidGlobError(f"exclude glob {pattern!r} is invalid: it holds a NUL character")
    directory_only = pattern.endswith("/")
    body = unicodedata.normalize("NFC", pattern.strip("/"))
    anchored = pattern.startswith("/") or "/" in body
    try:
        source, literals = _glob_source(body, within_name=not anchored)
    except InvalidGlobError as exc:
        raise InvalidGlobError(f"exclude glob {pattern!r} is invalid: {exc}") from None
    return _Glob(source, anchored, directory_only, max(literals, key=len))


def _glob_source(body: str, *, within_name: bool) -> tuple[str, list[str]]:
    """The RE2 source of a glob's ``body`` (its leading and trailing ``/`` stripped), read
    as git's wildmatch reads it with ``WM_PATHNAME`` (only a ``**`` that is a whole
    segment matches across ``/``), and its runs of plain characters. ``within_name``: the
    glob is matched against one name."""
    out: list[str] = []
    literals = [""]
    index = 0
    while index < len(body):
        char = body[index]
        found = _char_class(body, index) if char == "[" else None
        plain: str | None = None
        if char == "*":
            source, index = _stars(body, index, within_name=within_name)
        elif found is not None:
            source, index = found
        elif char == "?":
            source, index = "[^/]", index + 1
        elif char == "\\" and index + 1 < len(body):
            plain, index = body[index + 1], index + 2
        else:
            plain, index = char, index + 1
        if plain is None:
            out.append(source)
            literals.append("")
        else:
            out.append(re.escape(plain))
            literals[-1] += plain
    return "".join(out), literals


def _stars(body: str, start: int, *, within_name: bool) -> tuple[str, int]:
    """The source of the run of ``*`` at ``start``, and the index past it (and past the
    ``/`` that follows a leading or middle ``**``, which it matches too).

    A run of two or more between ``/`` (or the body's ends) matches across directories:
    ``**/`` any number of whole directories, a trailing ``**`` everything. Any other run,
    ``a**b`` say, is one ``*``: anything within one name.
    """
    end = start
    while end < len(body) and body[end] == "*":
        end += 1
    after = body[end : end + 2]
    segment = (start == 0 or body[start - 1] == "/") and (
        end == len(body) or after.startswith("/") or after == "\\/"
    )
    if end - start < 2 or not segment:
        return "[^/]*", end
    if end == len(body):
        return ("[^/]*" if within_name else ".*"), end
    return "(?:[^/]+/)*", end + (1 if after.startswith("/") else 2)


def _char_class(body: str, start: int) -> tuple[str, int] | None:
    """The source of the class opened by ``[`` at ``start``, and the index past it;
    ``None`` if it is never closed (the ``[`` is then itself).

    As git's wildmatch reads a class: ``!`` or ``^`` first negates it, a ``]`` first (after
    them) is a member, ``\\`` escapes the next character, ``a-z`` is a range; and, as
    with ``WM_PATHNAME``, it never matches ``/``. POSIX classes (``[[:digit:]]``) are
    refused, not read otherwise than git reads them.
    """
    index = start + 1
    negated = body.startswith(("!", "^"), index)
    first = index = index + negated
    members: list[tuple[int, int]] = []
    low: str | None = None  # the last lone member: where a range may start
    while index < len(body):
        char = body[index]
        if body.startswith("[:", index):
            raise InvalidGlobError("POSIX classes such as [[:digit:]] are not supported")
        if char == "]" and index > first:
            return _class_source(members, negated=negated), index + 1
        if char == "-" and low is not None and body[index + 1 : index + 2] not in ("", "]"):
            high, index = _class_member(body, index + 1)
            if high is None:
                return None
            if high < low:
                raise InvalidGlobError(f"reversed range {low}-{high}")
            members[-1] = (ord(low), ord(high))
            low = None
            continue
        member, index = _class_member(body, index)
        if member is None:
            return None
        members.append((ord(member), ord(member)))
        low = member
    return None


def _class_member(body: str, index: int) -> tuple[str | None, int]:
    """The character at ``index`` of a class (``\\`` escapes the next one), and the index
    past it; ``None`` for a ``\\`` that ends the glob."""
    if body[index] != "\\":
        return body[index], index + 1
    if index + 1 == len(body):
        return None, index + 1
    return body[index + 1], index + 2


def _class_source(members: list[tuple[int, int]], *, negated: bool) -> str:
    """An RE2 class of the code point ranges ``members`` (or of all others, ``negated``),
    ``/`` never among the characters it matches."""
    if negated:
        members = [*members, (_SLASH, _SLASH)]
    else:
        members = [piece for low, high in members for piece in _without_slash(low, high)]
        if not members:
            return _NOTHING
    ranges = "".join(
        f"\\x{{{low:x}}}" if low == high else f"\\x{{{low:x}}}-\\x{{{high:x}}}"
        for low, high in members
    )
    return f"[{'^' if negated else ''}{ranges}]"


def _without_slash(low: int, high: int) -> list[tuple[int, int]]:
    """The range ``low``-``high`` without ``/``: itself, two ranges or none."""
    if not low <= _SLASH <= high:
        return [(low, high)]
    return [piece for piece in ((low, _SLASH - 1), (_SLASH + 1, high)) if piece[0] <= piece[1]]


def _compile(pattern: str, source: str) -> Any:
    """The RE2 regex of ``source``, translated from the exclude glob ``pattern``.

    RE2, not :mod:`re`: the spec's writer chooses the globs, and with backtracking
    ``*a*a*a*a*b`` took 15 s on one 255-character name (each further ``*`` multiplies it);
    RE2 matches in time linear in the name.
    """
    try:
        return re2.compile("(?s)" + source, _RE2_OPTIONS)
    except (re2.error, UnicodeEncodeError) as exc:  # the latter: not UTF-8 (a lone surrogate)
        raise InvalidGlobError(f"exclude glob {pattern!r} is invalid: {exc}") from None


@lru_cache(maxsize=512)
def _glob_regex(pattern: str) -> tuple[Any, bool, bool]:
    """Compile one exclude glob: (regex, anchored at the root, matches directories only)."""
    glob = _translate(pattern)
    return _compile(pattern, glob.source + r"\z"), glob.anchored, glob.directory_only


def check_globs(patterns: Iterable[str]) -> None:
    """Raise :class:`InvalidGlobError` for the first exclude glob that cannot be compiled."""
    for pattern in patterns:
        _path_regex(pattern)


def glob_matches(pattern: str, path: str) -> bool:
    """True if the exclude glob ``pattern`` covers ``path`` (a normalised relative path).

    Globs follow .gitignore conventions: ``*``, ``?`` and ``[...]`` stay within one name,
    ``**`` between slashes crosses directories (elsewhere it is ``*``), a pattern without
    a ``/`` matches a name at any depth, a pattern with one is anchored at the library
    root, a trailing ``/`` matches only directories, and a matched directory covers
    everything beneath it.
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


class ExcludeMatcher:
    """The exclude globs of one sync, compiled once: what :func:`glob_matches` says of each
    glob, for all of them, at a cost per path linear in its length.

    Each glob is one regex over the whole path (matching a directory of it, a name, or
    itself), tried only on paths that hold the glob's longest run of plain characters:
    with the usual globs (``*.tmp``, ``node_modules/``, ``docs/**/*.md``) most paths are
    tried against none. One regex of all the globs would be faster still on usual names,
    but its automaton is the product of theirs: on long varied names it is rebuilt at
    almost every character, several times slower than the globs one by one.
    """

    def __init__(self, patterns: Iterable[str]) -> None:
        """Compile ``patterns``; raise :class:`InvalidGlobError` for one that cannot be."""
        unique = dict.fromkeys(patterns)
        self._globs = [(_translate(pattern).literal, _path_regex(pattern)) for pattern in unique]

    def excludes(self, path: str) -> bool:
        """True if an exclude glob covers ``path`` (a normalised relative path)."""
        encoded = b""  # RE2 reads UTF-8: encoded once, not once per glob tried
        for literal, regex in self._globs:
            if literal in path:
                encoded = encoded or path.encode()
                if regex.match(encoded):
                    return True
        return False


@lru_cache(maxsize=512)
def _path_regex(pattern: str) -> Any:
    """The regex of one (valid) glob over a whole path: it matches a path the glob covers.

    An anchored glob matches from the root up to a ``/`` (a directory) or the end; an
    unanchored one, which never matches a ``/``, from a name's start to its end.
    """
    glob = _translate(pattern)
    end = "/" if glob.directory_only else r"(?:/|\z)"
    start = "" if glob.anchored else "(?:[^/]+/)*"
    return _compile(pattern, start + glob.source + end)


#: Stands in the disabled paths for the library's root: every file is disabled.
WHOLE_LIBRARY = ""


def normalise_disabled(paths: Iterable[str]) -> frozenset[str]:
    """Disabled paths in normal form: ``/a/b/``, ``./a/b`` and ``a/x/../b`` are ``a/b``,
    and ``/`` or ``.`` is the whole library (:data:`WHOLE_LIBRARY`). An entry above the
    root (``../a``), or one no synced path can be (a control character, a backslash),
    matches nothing: no file of the library is under it."""
    result: set[str] = set()
    for path in paths:
        resolved = normpath(path.strip("/") or ".")
        if path and resolved == ".":
            result.add(WHOLE_LIBRARY)
        elif path and resolved != ".." and not resolved.startswith("../"):
            try:
                result.add(normalise_path(resolved))
            except UnsafePathError:
                continue
    return frozenset(result)


def is_disabled(path: str, disabled: frozenset[str]) -> bool:
    """True if ``path`` or one of its directories is a disabled path (or the whole library is)."""
    if not disabled:
        return False
    return (
        WHOLE_LIBRARY in disabled
        or path in disabled
        or any(parent in disabled for parent in ancestors(path))
    )
