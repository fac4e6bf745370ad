"""The destination manifest: which files the library directory holds, with size and ETag.

The manifest lives at ``<root>/.craft-sync/manifest`` and is a line journal, so that an
incremental sync only appends a few lines instead of re-sending a listing of every file::

    craft-library-manifest 1
    +<TAB>size<TAB>etag<TAB>path     the file is present with this size and ETag
    ?<TAB><TAB><TAB>path             the file may be half-changed: its state is unknown
    -<TAB><TAB><TAB>path             the file is gone

Later lines override earlier ones. Before a sync touches any file it appends ``?`` lines
for everything it will replace or delete; only after the files are in place does it append
the final ``+``/``-`` lines (or replace the manifest by a compacted one). An interrupted sync
therefore leaves those paths unknown, and the next sync copies them again (or deletes them).
A torn last line (no newline) is ignored. Paths cannot contain tabs or newlines (control
characters are rejected keys), and every path read back is checked again, since the pod can
write this file too.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from craft_operator.library.paths import is_normal_path

logger = logging.getLogger(__name__)

HEADER = "craft-library-manifest 1"
#: Compact (send a whole new manifest) once the journal has this many lines more than
#: twice the number of files it describes.
COMPACTION_SLACK = 256


@dataclass(frozen=True)
class ManifestEntry:
    """What the destination holds at one path; ``None`` fields mean "unknown, re-sync"."""

    size: int | None
    etag: str | None

    @property
    def known(self) -> bool:
        """False if an interrupted sync may have left this path half-changed."""
        return self.size is not None and self.etag is not None


UNKNOWN = ManifestEntry(size=None, etag=None)


@dataclass(frozen=True)
class Manifest:
    """The folded manifest: path to entry, and how many journal lines produced it."""

    entries: Mapping[str, ManifestEntry]
    lines: int
    valid: bool

    @property
    def needs_compaction(self) -> bool:
        """True if the next sync should write a whole new manifest instead of appending."""
        return not self.valid or self.lines > 2 * len(self.entries) + COMPACTION_SLACK


EMPTY = Manifest(entries={}, lines=0, valid=False)


def parse_manifest(data: bytes | None) -> Manifest:
    """Fold a manifest journal; a missing or unreadable one is empty and not ``valid``."""
    if not data:
        return EMPTY
    text = data.decode("utf-8", errors="replace")
    lines = text.split("\n")
    complete, torn = lines[:-1], lines[-1]
    if torn:
        logger.warning("ignoring a torn last line in the library manifest")
    if not complete or complete[0] != HEADER:
        logger.warning("the library manifest has no known header; treating it as empty")
        return EMPTY
    entries: dict[str, ManifestEntry] = {}
    for line in complete[1:]:
        if line == HEADER or not line:
            continue
        fields = line.split("\t")
        if len(fields) != 4 or not is_normal_path(fields[3]):
            continue
        op, size, etag, path = fields
        if op == "+" and _is_size(size) and etag:
            entries[path] = ManifestEntry(size=int(size), etag=etag)
        elif op == "?":
            entries[path] = UNKNOWN
        elif op == "-":
            entries.pop(path, None)
    return Manifest(entries=entries, lines=len(complete), valid=True)


def _is_size(text: str) -> bool:
    """ASCII digits only, at most 20 (``str.isdigit`` also takes "²", which ``int`` refuses,
    and ``int`` refuses over 4,300 digits): the pod may have written the manifest."""
    return 0 < len(text) <= 20 and text.isascii() and text.isdigit()


def longest_line(entries: Mapping[str, ManifestEntry]) -> int:
    """The bytes of the longest line a manifest of ``entries`` holds (a file's ``+`` line)."""
    return max(
        (len(_line("+", path, entry).encode()) for path, entry in entries.items()), default=0
    )


def _line(op: str, path: str, entry: ManifestEntry | None = None) -> str:
    if entry is None or not entry.known:
        return f"{op}\t\t\t{path}\n"
    return f"{op}\t{entry.size}\t{entry.etag}\t{path}\n"


def render_manifest(entries: Mapping[str, ManifestEntry]) -> bytes:
    """A whole compacted manifest for ``entries`` (an unknown one stays unknown: ``?``)."""
    body = "".join(
        _line("+" if entries[path].known else "?", path, entries[path]) for path in sorted(entries)
    )
    return (HEADER + "\n" + body).encode()


def render_pending(paths: Iterable[str], *, with_header: bool) -> bytes:
    """The ``?`` lines appended before any file is touched."""
    head = HEADER + "\n" if with_header else ""
    return (head + "".join(_line("?", path) for path in sorted(paths))).encode()


def render_final(copied: Mapping[str, ManifestEntry], deleted: Iterable[str]) -> bytes:
    """The lines appended once the copied files are in place and the deleted ones gone."""
    lines = [_line("-", path) for path in sorted(deleted)]
    lines += [_line("+", path, copied[path]) for path in sorted(copied)]
    return "".join(lines).encode()


def is_safe_etag(etag: str) -> bool:
    """True if the ETag can be stored in a manifest line (no tabs, newlines or controls)."""
    return bool(etag) and all(ord(char) >= 0x20 and char != "\x7f" for char in etag)


def should_compact(
    manifest: Manifest,
    touched: int,
    files_after: int,
    *,
    longest: int = 0,
    cap: int | None = None,
) -> bool:
    """True if the sync should write a whole manifest rather than append ``touched`` paths:
    the journal would pass two lines per file and :data:`COMPACTION_SLACK`, or, with
    lines of up to ``longest`` bytes, could pass ``cap`` (what is read of it: past it, the
    next sync would find it too large and copy the library in full)."""
    if not manifest.valid:
        return True
    lines = manifest.lines + 2 * touched
    return lines > 2 * files_after + COMPACTION_SLACK or (cap is not None and lines * longest > cap)
