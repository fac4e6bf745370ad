"""Where a library is synced to, and the change set handed to it.

Two destinations share one protocol and one order of work: the sandbox pod over exec
(:mod:`craft_operator.library.transfer`) and a local directory
(:mod:`craft_operator.library.local`, used by the CLI and by Job mode). Both

1. write the new files aside (a staging directory inside the library root, so renames stay
   on one filesystem);
2. append ``pending`` to the manifest: every path about to change becomes "unknown";
3. delete, then rename the staged files into place;
4. append ``final`` to the manifest, or replace it when ``replace_manifest`` is set.

An interruption at any point leaves whole files, and the next sync repairs the rest.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from craft_operator.library.manifest import (
    Manifest,
    longest_line,
    render_final,
    render_manifest,
    render_pending,
    should_compact,
)
from craft_operator.library.plan import PlannedCopy, SyncPlan
from craft_operator.library.s3 import ObjectStore


@dataclass(frozen=True)
class ChangeSet:
    """Everything a destination needs to apply one plan."""

    copies: tuple[PlannedCopy, ...]
    deletes: tuple[str, ...]
    pending: bytes
    final: bytes
    replace_manifest: bool


def change_set(plan: SyncPlan, manifest: Manifest, *, cap: int | None = None) -> ChangeSet:
    """The change set for ``plan`` on a destination whose manifest is ``manifest``, of which
    at most ``cap`` bytes are read."""
    touched = [copy.path for copy in plan.copies] + list(plan.deletes)
    longest = longest_line(plan.library) if cap is not None else 0
    replace = should_compact(manifest, len(touched), plan.files, longest=longest, cap=cap)
    final = (
        render_manifest(plan.library)
        if replace
        else render_final({copy.path: copy.entry for copy in plan.copies}, plan.deletes)
    )
    return ChangeSet(
        copies=plan.copies,
        deletes=plan.deletes,
        pending=render_pending(touched, with_header=not manifest.valid),
        final=final,
        replace_manifest=replace,
    )


class Destination(Protocol):
    """A place a library is synced to."""

    async def read_manifest(self) -> bytes | None:
        """The raw manifest, or ``None`` if there is none yet."""
        ...

    async def apply(self, changes: ChangeSet, store: ObjectStore, bucket: str) -> int:
        """Apply ``changes`` (reading new files from ``store``); return the bytes sent."""
        ...
