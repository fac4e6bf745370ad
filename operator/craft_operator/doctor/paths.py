"""Whether the operator can create a file doctor finds missing (the embedded database, the
development key ring): ``doctor`` only reads, so it looks at the folders instead."""

from __future__ import annotations

import os
from pathlib import Path

#: What a path the operator cannot create needs.
WRITABLE_FIX = (
    "set CRAFT_STATE_DIR (or CRAFT_DATABASE_URL) to a folder the operator may write in, "
    "e.g. a volume"
)


def creation_problem(path: Path) -> str | None:
    """Why the operator could not create ``path`` and the folders missing above it, or
    None. It makes them under the nearest one that exists, which must be a directory it
    may write in and enter: below a regular file, in a read-only folder or one another
    user owns, the operator would fail every sandbox at its first PAT."""
    existing = path.parent
    # os.path.exists, not Path.exists: a folder it may not enter is "missing" too.
    while not os.path.exists(existing) and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        return f"{existing} is not a directory"
    if not os.access(existing, os.W_OK | os.X_OK):
        return f"this user (uid {os.getuid()}) may not create files in {existing}"
    return None
