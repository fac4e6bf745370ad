"""Exec mode: applying a change set to ``/workspace/user_library`` inside the sandbox pod.

The pod needs only ``sh`` and ``tar``; it never sees S3 credentials. Every command is an
argv: fixed ``sh -c`` scripts below, with paths passed as positional arguments, so no data
is ever parsed by a shell. One sync runs

1. ``READ``: print the manifest (not for a pod the operator has no record of: its
   manifest, if any, is replaced unread);
2. ``UPLOAD``: once the state directory and the manifest are found writable (else
   :class:`~craft_operator.library.errors.DestinationUnwritableError`, before the archive
   is read), a tar stream on stdin (the new files, then the ``pending`` and ``final``
   manifest pieces) is unpacked into ``.craft-sync/staging.<random>``, a directory of this
   sync's own (earlier ones' removed first); then ``pending`` is appended
   to the manifest;
3. ``APPLY`` (in batches that keep each exec request small): delete, rename staged files
   into place, and in the last batch write the manifest and drop the staging directory.

The upload and the first batch run in one exec (``UPLOAD_SCRIPT`` then ``APPLY_SCRIPT``:
one ``sh``, one connection), so a library whose paths fit one batch is synced into a new
pod by a single exec.

Paths reach the scripts already validated (:mod:`craft_operator.library.paths`): relative,
no ``.``/``..`` segments, no control characters. Each is used only as ``"$r/$p"`` with an
absolute ``$r``, so none can be read as an option. The agent in the pod runs as the same
user as these commands, so it cannot use planted symlinks to gain anything it lacks.
"""

from __future__ import annotations

import posixpath
import secrets
from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import partial
from urllib.parse import quote

from craft_operator.kube.exec import (
    ExecError,
    ExecOutputTooLargeError,
    ExecResult,
    ExecStalledError,
    ExecTimeoutError,
    ExecTransport,
    Stdin,
    paced,
)
from craft_operator.library.destination import ChangeSet
from craft_operator.library.errors import (
    DestinationUnwritableError,
    ExecCommandFailedError,
    ExecFailedError,
    ExecTimedOutError,
)
from craft_operator.library.paths import STATE_DIR
from craft_operator.library.record import PodManifest
from craft_operator.library.s3 import ObjectStore, WholeObjectReader
from craft_operator.library.tarstream import PREFETCH_BYTES, ByteCounter, TarMember, tar_stream

LIBRARY_ROOT = "/workspace/user_library"
#: Default of CRAFT_LIBRARY_MANIFEST_MAX_BYTES: the most of the pod's manifest ever read.
MANIFEST_MAX_BYTES = 4 * 1024 * 1024
#: Output kept of the other commands (they print nothing but errors).
COMMAND_MAX_OUTPUT = 64 * 1024

READ_SCRIPT = """\
m="$1/.craft-sync/manifest"
if [ -f "$m" ]; then exec head -c "$2" "$m"; fi
"""

#: Exit status of the upload when the state directory or the manifest cannot be written
#: (none of the commands the scripts run exits with it).
UNWRITABLE_EXIT = 77

#: Each upload unpacks into a staging directory of its own (``staging.<random>``, the second
#: argument): a command the operator abandoned (its S3 source failed mid-stream, say) runs on
#: in the pod until it meets the end of its stdin, and an upload started meanwhile shared
#: one directory with it: the one's ``mkdir`` could fail on the other's, failing that sync.
#: An upload first removes every staging directory left by earlier ones.
#:
#: The archive ends with ``final`` (or ``manifest``): tar stops without a word at the end of
#: its input between two members, and an exec whose caller went away gets the end of its
#: stdin early, so nothing is applied unless that last member came. Before tar reads the
#: archive, the state directory and the manifest are checked: writing to them fails only
#: once the whole archive is in, and every retry would send it again.
UPLOAD_SCRIPT = f"""\
set -eu
s="$1/.craft-sync"
t="$s/$2"
m="$s/manifest"
if [ -e "$s" ] && {{ [ ! -d "$s" ] || [ ! -w "$s" ] || [ ! -x "$s" ]; }}; then
  echo "$s is not a directory the sync can write" >&2
  exit {UNWRITABLE_EXIT}
fi
if [ -e "$m" ] && {{ [ ! -f "$m" ] || [ ! -w "$m" ]; }}; then
  echo "$m is not a regular file the sync can write" >&2
  exit {UNWRITABLE_EXIT}
fi
mkdir -p "$s"
rm -rf "$s"/staging*
mkdir "$t"
tar -x -o -f - -C "$t"
if [ ! -f "$t/final" ] && [ ! -f "$t/manifest" ]; then
  echo "the upload ended before the end of its archive" >&2
  exit 1
fi
cat "$t/pending" >> "$m"
"""

APPLY_SCRIPT = """\
set -eu
r="$1"; finish="$3"; n="$4"
s="$r/.craft-sync"
t="$s/$2"
shift 4
while [ "$n" -gt 0 ]; do
  rm -rf "$r/$1"
  d=$(dirname "$r/$1")
  while [ "$d" != "$r" ] && rmdir "$d" 2>/dev/null; do d=$(dirname "$d"); done
  n=$((n - 1)); shift
done
for p do
  d=$(dirname "$r/$p")
  if ! mkdir -p "$d" 2>/dev/null; then
    # Something that is not a directory stands where S3 needs one: S3 wins.
    a="$d"
    while [ "$a" != "$r" ]; do
      if [ ! -d "$a" ] && { [ -e "$a" ] || [ -L "$a" ]; }; then rm -f "$a"; fi
      a=$(dirname "$a")
    done
    mkdir -p "$d"
  fi
  if [ -L "$r/$p" ] || [ -d "$r/$p" ]; then rm -rf "$r/$p"; fi
  mv -f "$t/files/$p" "$r/$p"
done
if [ "$finish" = 1 ]; then
  if [ -f "$t/manifest" ]; then
    mv -f "$t/manifest" "$s/manifest"
  else
    cat "$t/final" >> "$s/manifest"
  fi
  rm -rf "$t"
fi
"""

assert STATE_DIR == ".craft-sync"  # the scripts spell it out


@dataclass(frozen=True)
class PodTarget:
    """The container whose ``root`` receives the library."""

    namespace: str
    pod: str
    container: str
    root: str = LIBRARY_ROOT


def apply_batches(
    deletes: Sequence[str], moves: Sequence[str], budget: int
) -> list[tuple[list[str], list[str]]]:
    """Split deletions and moves into batches whose argv stays within ``budget`` bytes.

    The budget counts URL-encoded bytes: the exec API carries argv in the request URL.
    Deletions come first; every batch holds at least one path, so a huge path still goes.
    """
    batches: list[tuple[list[str], list[str]]] = [([], [])]
    used = 0
    for kind, paths in ((0, deletes), (1, moves)):
        for path in paths:
            cost = len(quote(path, safe="")) + len("&command=")
            current = batches[-1]
            if used + cost > budget and (current[0] or current[1]):
                batches.append(([], []))
                used = 0
            batches[-1][kind].append(path)
            used += cost
    return batches


class PodDestination:
    """:class:`~craft_operator.library.destination.Destination` in a pod, over exec."""

    def __init__(
        self,
        transport: ExecTransport,
        target: PodTarget,
        *,
        timeout_seconds: float = 120.0,
        min_bytes_per_second: float = 1_000_000.0,
        argv_budget_bytes: int = 64 * 1024,
        manifest_max_bytes: int = MANIFEST_MAX_BYTES,
    ) -> None:
        """Run commands in ``target`` through ``transport``.

        Each command may take ``timeout_seconds``; the upload gets one more second per
        ``min_bytes_per_second`` bytes it carries, and the pod must keep that pace as it
        takes the upload (its own time only, not the reads from S3), or the upload is
        abandoned early. At most ``manifest_max_bytes`` of the
        pod's manifest are read.
        """
        root = posixpath.normpath(target.root)
        if not root.startswith("/") or root == "/":
            raise ValueError(f"the library root must be an absolute directory, not {target.root!r}")
        self._transport = transport
        self._target = replace(target, root=root)
        self._timeout = timeout_seconds
        self._rate = min_bytes_per_second
        self._budget = argv_budget_bytes
        self.manifest_max_bytes = manifest_max_bytes

    async def _run(
        self,
        what: str,
        argv: Sequence[str],
        stdin: Stdin = None,
        limit: float | None = None,
        max_output: int = COMMAND_MAX_OUTPUT,
    ) -> ExecResult:
        target = self._target
        try:
            result = await self._transport.run(
                target.namespace,
                target.pod,
                target.container,
                argv,
                stdin=stdin,
                timeout=limit or self._timeout,
                max_output_bytes=max_output,
            )
        except ExecStalledError as exc:
            raise ExecTimedOutError(f"{what}: {exc}; it was abandoned") from exc
        except ExecTimeoutError as exc:
            raise ExecTimedOutError(
                f"{what} in pod {target.namespace}/{target.pod}: the command did not finish "
                f"within {limit or self._timeout:.0f}s of its own time (waiting on S3 not "
                "counted) and was abandoned"
            ) from exc
        except ExecError as exc:
            raise ExecFailedError(
                f"{what} in pod {target.namespace}/{target.pod}: {exc}", retryable=exc.retryable
            ) from exc
        if result.exit_code == 0:
            return result
        message = result.stderr_excerpt() or "no message"
        if result.exit_code == UNWRITABLE_EXIT:
            raise DestinationUnwritableError(
                f"the library in pod {target.namespace}/{target.pod} cannot be written: "
                f"{message} (the agent in the pod may have changed it); nothing was applied, "
                "and the library is synced again once it has a new revision, a new pod or a "
                "new configuration"
            )
        raise ExecCommandFailedError(
            f"{what} in pod {target.namespace}/{target.pod} exited with "
            f"{result.exit_code}: {message}"
        )

    async def read_pod_manifest(self) -> PodManifest:
        """The manifest in the pod (``data`` None: there is none), or that it is too large.

        ``head`` in the pod stops after the cap, and the transport stops reading soon after
        it whatever the pod sends instead, so the operator never holds more.
        """
        cap = self.manifest_max_bytes
        argv = ["sh", "-c", READ_SCRIPT, "sh", self._target.root, str(cap + 1)]
        try:
            result = await self._run(
                "reading the library manifest", argv, max_output=cap + 1 + COMMAND_MAX_OUTPUT
            )
        except ExecFailedError as exc:
            if isinstance(exc.__cause__, ExecOutputTooLargeError):
                return PodManifest(data=None, too_large=True)
            raise
        if len(result.stdout) > cap:
            return PodManifest(data=None, too_large=True)
        return PodManifest(data=result.stdout or None)

    async def read_manifest(self) -> bytes | None:
        """The manifest in the pod, or ``None`` if there is none or it is over the cap."""
        return (await self.read_pod_manifest()).data

    async def apply(self, changes: ChangeSet, store: ObjectStore, bucket: str) -> int:
        """Upload, delete, rename and record ``changes``; return the bytes sent on stdin."""
        whole = store if isinstance(store, WholeObjectReader) else None
        members = [
            TarMember(
                name=f"files/{copy.path}",
                size=copy.size,
                mtime=copy.last_modified.timestamp() if copy.last_modified else 0.0,
                open=partial(store.open_object, bucket, copy.key, copy.etag),
                label=f"s3://{bucket}/{copy.key}",
                fetch=(
                    partial(whole.fetch_object, bucket, copy.key, copy.etag, copy.size)
                    if whole is not None and copy.size <= PREFETCH_BYTES
                    else None
                ),
            )
            for copy in changes.copies
        ]
        members.append(TarMember("pending", len(changes.pending), data=changes.pending))
        last = "manifest" if changes.replace_manifest else "final"
        members.append(TarMember(last, len(changes.final), data=changes.final))
        counter = ByteCounter()
        payload = sum(copy.size for copy in changes.copies)
        moves = [copy.path for copy in changes.copies]
        batches = apply_batches(changes.deletes, moves, self._budget)
        staging = f"staging.{secrets.token_hex(8)}"
        for index, (deletes, moved) in enumerate(batches):
            finish = "1" if index == len(batches) - 1 else "0"
            paths = [self._target.root, staging, finish, str(len(deletes)), *deletes, *moved]
            if index == 0:
                await self._run(
                    "unpacking and applying the library upload",
                    ["sh", "-c", UPLOAD_SCRIPT + APPLY_SCRIPT, "sh", *paths],
                    stdin=paced(
                        tar_stream(members, counter),
                        grace=self._timeout,
                        bytes_per_second=self._rate,
                        where=f"{self._target.namespace}/{self._target.pod}",
                    ),
                    limit=self._timeout + payload / self._rate,
                )
            else:
                await self._run(
                    "applying the library changes", ["sh", "-c", APPLY_SCRIPT, "sh", *paths]
                )
        return counter.value
