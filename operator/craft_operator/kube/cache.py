"""An in-memory cache of the objects the operator watches, fed by watch events and writes.

The reconciler reads children from here instead of the API: a resync of thousands of
sandboxes with nothing to do then costs no API calls at all. Our own writes go in as soon
as the API answers (write-through), so the next reconcile does not act on a stale view
while the watch event is still on its way; an older event never overwrites a newer object.
A stream's list, though, is the truth about what the cache held before it began (see
:meth:`ObjectCache.list_begins`): after etcd was restored from a backup, the versions go
back, and an object listed at an older version, or missing from the list, is no news the
ordering may refuse.

The cache keeps what the operator reads, not the whole object: never ``managedFields``
(often bigger than the rest), and of a Pod (by far the biggest object per sandbox on a real
server: defaulted spec, volume mounts, container statuses) only :func:`compact_pod`'s
fields. Every other kind is kept whole but for its managed fields: a sandbox is parsed and
compared in full, a Secret's or ConfigMap's data is converged. Keys and short strings are
interned: thousands of objects then share one "metadata", one "True", one namespace
(a third to a half of a cached object's memory; JSON decoding shares nothing across
objects).
"""

from __future__ import annotations

import bisect
import contextlib
import sys
import time
from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from craft_operator.api.constants import LABEL_SANDBOX
from craft_operator.api.pool import LABEL_CLAIMED_FROM, LABEL_POOL
from craft_operator.kube.pod_shape import DIGEST, SHAPE, digest_of, shape_of

Key = tuple[str, str | None, str]
#: Seconds a deletion's tombstone is kept: long enough for any event older than the
#: deletion still on its way (a list made before it, a watch behind), not for ever: the
#: names of pool pods and sync Jobs never come back, and their tombstones would pile up.
TOMBSTONE_SECONDS = 600.0
#: Labels whose values the cache indexes, so that finding a pool's pods among thousands of
#: sandbox pods (which a claim does) costs nothing like a scan of the namespace.
#: The sandbox label finds a sandbox's claimed pod, which is not named after it.
INDEXED_LABELS = (LABEL_POOL, LABEL_CLAIMED_FROM, LABEL_SANDBOX)
LabelKey = tuple[str, str | None, str, str]


def _version(obj: Mapping[str, Any]) -> int | None:
    raw = obj.get("metadata", {}).get("resourceVersion")
    try:
        return int(raw)
    except (TypeError, ValueError):
        return None  # resourceVersions are opaque; only compare those that are numbers


#: The kind whose objects are compacted (``kinds.POD.name``, spelled here: kinds imports
#: this module).
POD_KIND = "Pod"
#: What the operator reads of a pod besides its metadata: the phase and why it ended, the
#: conditions (Ready, PodScheduled), each container's state (why it waits; a Job's
#: termination message), and the containers' images (an edited image is drift).
POD_STATUS_FIELDS = ("phase", "reason", "message", "conditions", "containerStatuses")
POD_CONDITION_FIELDS = ("type", "status", "reason", "message", "lastTransitionTime")
CONTAINER_STATUS_FIELDS = ("name", "ready", "state")
CONTAINER_FIELDS = ("name", "image")


#: Strings up to this length are interned (names, reasons, timestamps); longer ones (a
#: condition's message, a Secret's data) are rarely shared.
SHARED_STRING_LENGTH = 64


def _trimmed(kind: str, obj: Mapping[str, Any]) -> dict[str, Any]:
    """The object without its managed fields, which the operator never reads (and which
    are often bigger than the rest of the object); a pod as :func:`compact_pod` keeps it."""
    trimmed = compact_pod(obj) if kind == POD_KIND else dict(obj)
    meta = trimmed.get("metadata")
    if isinstance(meta, Mapping) and "managedFields" in meta:
        trimmed["metadata"] = {k: v for k, v in meta.items() if k != "managedFields"}
    compact: dict[str, Any] = shared(trimmed)
    return compact


def shared(value: Any) -> Any:
    """A deep copy of ``value`` whose keys and short strings are interned (held once by the
    interpreter, freed with their last user)."""
    if isinstance(value, dict):
        return {sys.intern(key): shared(item) for key, item in value.items()}
    if isinstance(value, list):
        return [shared(item) for item in value]
    if isinstance(value, str) and len(value) <= SHARED_STRING_LENGTH:
        return sys.intern(value)
    return value


def _pick(obj: Any, fields: tuple[str, ...]) -> Any:
    if not isinstance(obj, Mapping):
        return obj
    return {key: obj[key] for key in fields if key in obj}


def compact_pod(pod: Mapping[str, Any]) -> dict[str, Any]:
    """The fields of a pod the operator reads: its metadata, its containers' names and
    images, :data:`POD_STATUS_FIELDS` (conditions and container statuses without their
    timestamps, IDs and mounts), and an unclaimed pool pod's shape (:mod:`.pod_shape`)."""
    compact: dict[str, Any] = {k: v for k, v in pod.items() if k not in ("spec", "status")}
    spec = pod.get("spec")
    if isinstance(spec, Mapping):
        containers = spec.get("containers") or []
        compact["spec"] = {"containers": [_pick(c, CONTAINER_FIELDS) for c in containers]}
        if LABEL_POOL in (pod.get("metadata", {}).get("labels") or {}):  # pool pods only
            shape = shape_of(spec)  # what a claim and the pool check (see pod_shape)
            compact["spec"][SHAPE], compact["spec"][DIGEST] = shape, digest_of(shape)
    status = pod.get("status")
    if isinstance(status, Mapping):
        kept = _pick(status, POD_STATUS_FIELDS)
        if "conditions" in kept:
            kept["conditions"] = [_pick(c, POD_CONDITION_FIELDS) for c in kept["conditions"] or []]
        if "containerStatuses" in kept:
            kept["containerStatuses"] = [
                _pick(c, CONTAINER_STATUS_FIELDS) for c in kept["containerStatuses"] or []
            ]
        compact["status"] = kept
    return compact


@dataclass(frozen=True, eq=False)
class OrderedIndex:
    """A view of one kind that the cache keeps up to date as objects come and go: each
    object's group (``None``: in none), computed from the object as cached, and the
    group's names in ``order`` (then by name; a group names its namespace, if the kind has
    one, for its entries are names only). Reading a group costs nothing like a scan:
    what :meth:`ObjectCache.ordered` returns is kept as objects change, not built per read.
    Compared by identity: one instance per index."""

    kind: str
    group: Callable[[Mapping[str, Any]], Hashable | None]
    order: Callable[[Mapping[str, Any]], str]


class _Group:
    """One group of an :class:`OrderedIndex`: its (order, name) entries, sorted, and their
    names in the same places (what a read returns, without building a list)."""

    __slots__ = ("entries", "names")

    def __init__(self) -> None:
        self.entries: list[tuple[str, str]] = []
        self.names: list[str] = []

    def add(self, entry: tuple[str, str]) -> None:
        at = bisect.bisect_left(self.entries, entry)
        self.entries.insert(at, entry)
        self.names.insert(at, entry[1])

    def discard(self, entry: tuple[str, str]) -> None:
        at = bisect.bisect_left(self.entries, entry)
        if at < len(self.entries) and self.entries[at] == entry:
            del self.entries[at]
            del self.names[at]


class ObjectCache:
    """Latest known object per (kind, namespace, name)."""

    def __init__(self, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._objects: dict[Key, dict[str, Any]] = {}
        #: The version of each deletion and when it was seen, oldest first.
        self._tombstones: dict[Key, tuple[int, float]] = {}
        self._clock = clock
        #: The names of the cached objects per (kind, namespace).
        self._names: dict[tuple[str, str | None], set[str]] = {}
        #: The names per (kind, namespace, label, value) of the :data:`INDEXED_LABELS`.
        self._labelled: dict[LabelKey, set[str]] = {}
        #: Per ordered index in use: each group's (order, name) entries, sorted, and where
        #: each object of its kind is placed.
        self._groups: dict[OrderedIndex, dict[Hashable, _Group]] = {}
        self._placed: dict[OrderedIndex, dict[Key, tuple[Hashable, tuple[str, str]]]] = {}
        #: The (kind, namespace) scopes whose watch stream is failing (``None``: the
        #: cluster-wide stream): what is cached of them may be out of date.
        self._stale: set[tuple[str, str | None]] = set()
        #: Per scope whose stream is listing it: the keys written since the list began.
        self._listing: dict[tuple[str, str | None], set[Key]] = {}
        #: The scope whose list's own event is being put or removed (:meth:`list_event`).
        self._delivering: tuple[str, str | None] | None = None

    def __len__(self) -> int:
        return len(self._objects)

    def get(self, kind: str, namespace: str | None, name: str) -> dict[str, Any] | None:
        """The cached object, or ``None`` if it is not known to exist."""
        return self._objects.get((kind, namespace, name))

    def put(self, kind: str, obj: Mapping[str, Any], *, read: bool = False) -> bool:
        """Record an object seen in a watch event or returned by a write; ``read``: by a
        read (GET) of it just now.

        Returns whether it is news: False for an older version, or for the same version
        (the echo of the operator's own write, which it has already acted on). A read
        object exists, so a tombstone of its very version is not its deletion (whose
        answer and watch event carry that version too) but its leaving a watch's label
        selector (an edited label: the API server says DELETED at the edit's version).
        """
        meta = obj.get("metadata", {})
        key = (kind, meta.get("namespace"), meta["name"])
        incoming = _version(obj)
        current = self._objects.get(key)
        if current is not None:
            known = _version(current)
        else:
            tombstone = self._tombstones.get(key)
            known = tombstone[0] if tombstone is not None else None
            if read and known is not None:
                known -= 1
        older = incoming is not None and known is not None and incoming <= known
        # What a list finds of an object not written since it began is the truth, at
        # whatever version (etcd restored); the same version is no news all the same.
        if older and (not self._listed_anew(key) or (current is not None and incoming == known)):
            return False
        self._touch(key)
        self._tombstones.pop(key, None)
        if current is not None:
            self._index(key, current, add=False)
        stored = self._objects[key] = _trimmed(kind, obj)
        self._names.setdefault(key[:2], set()).add(key[2])
        self._index(key, obj, add=True)
        for index in self._groups:
            if index.kind == kind:
                self._place(index, key, stored)
        return True

    def _index(self, key: Key, obj: Mapping[str, Any], *, add: bool) -> None:
        labels = obj.get("metadata", {}).get("labels") or {}
        for label in INDEXED_LABELS:
            value = labels.get(label)
            if value is None:
                continue
            index = (*key[:2], label, str(value))
            if add:
                self._labelled.setdefault(index, set()).add(key[2])
                continue
            names = self._labelled.get(index)
            if names is not None:
                names.discard(key[2])
                if not names:
                    del self._labelled[index]

    def ordered(self, index: OrderedIndex, group: Hashable) -> Sequence[str]:
        """The names in ``group`` of ``index``, in its order; the cache's own, kept as
        objects change: read it before the next await, never change it. The first read of
        an index builds it from the objects cached then."""
        groups = self._groups.get(index)
        if groups is None:
            groups = self._groups[index] = {}
            self._placed[index] = {}
            for key, obj in self._objects.items():
                if key[0] == index.kind:
                    self._place(index, key, obj)
        found = groups.get(group)
        return () if found is None else found.names

    def _place(self, index: OrderedIndex, key: Key, obj: Mapping[str, Any] | None) -> None:
        """Put ``key`` where ``obj`` (``None``: gone) belongs in ``index``."""
        placed = self._placed[index]
        group = None if obj is None else index.group(obj)
        entry = ("", "") if obj is None or group is None else (index.order(obj), key[2])
        before = placed.get(key)
        if before == (group, entry):
            return
        groups = self._groups[index]
        if before is not None:
            members = groups[before[0]]
            members.discard(before[1])
            if not members.names:
                del groups[before[0]]
            del placed[key]
        if group is not None:
            groups.setdefault(group, _Group()).add(entry)
            placed[key] = (group, entry)

    def remove(self, kind: str, obj: Mapping[str, Any]) -> None:
        """Forget an object that was deleted (a later, older event cannot bring it back)."""
        meta = obj.get("metadata", {})
        key = (kind, meta.get("namespace"), meta["name"])
        current = self._objects.get(key)
        incoming = _version(obj)
        if current is not None and incoming is not None and not self._listed_anew(key):
            known = _version(current)
            if known is not None and incoming < known:
                return  # a newer object of the same name exists already
        self._touch(key)
        self._drop(key)
        now = self._clock()
        if incoming is not None:
            self._tombstones.pop(key, None)  # to the end: the order is the age
            self._tombstones[key] = (incoming, now)
        self._expire_tombstones(now - TOMBSTONE_SECONDS)

    def _expire_tombstones(self, before: float) -> None:
        while self._tombstones:
            key, (_, seen) = next(iter(self._tombstones.items()))
            if seen > before:
                return
            del self._tombstones[key]

    def list_begins(self, kind: str, namespace: str | None) -> None:
        """A stream begins to list ``kind`` in ``namespace`` (``None``: all): until
        :meth:`list_ends`, what it finds of an object not written since (put or removed)
        replaces what the cache holds, at whatever version.

        A list is a consistent read made after every write the cache holds from before it
        began, so it is never older than them, unless etcd went back (restored from a
        backup: Kubernetes' versions are then lower, and were they compared, objects deleted
        since the backup would stay and restored ones keep their lost state). What is
        written once the list began (the operator's own writes, answered meanwhile) may be
        newer than the list, and keeps the ordering."""
        self._listing[(kind, namespace)] = set()

    def list_ends(self, kind: str, namespace: str | None, version: str | None) -> None:
        """The list of :meth:`list_begins` is in (after its deletions), at ``version``, or
        failed (``None``). The deletions older than they can be, after a version the list
        says is not yet the server's (etcd went back), go: a name deleted in the lost
        history and made anew would otherwise be refused for up to ten minutes."""
        written = self._listing.pop((kind, namespace), set())
        listed = _version({"metadata": {"resourceVersion": version}})
        if listed is None:
            return
        for key, (deleted, _) in list(self._tombstones.items()):
            in_scope = key[0] == kind and namespace in (None, key[1])
            if in_scope and deleted > listed and key not in written:
                del self._tombstones[key]

    @contextlib.contextmanager
    def list_event(self, kind: str, namespace: str | None) -> Iterator[None]:
        """Within it, what is put or removed is an event of the list of :meth:`list_begins`
        (an object it found, or one it lacks): only such an event replaces what the cache
        held from before the list, whatever the versions. Any other writer meanwhile (another
        reader's older snapshot, the removal of a stale copy) keeps the ordering."""
        self._delivering = (kind, namespace)
        try:
            yield
        finally:
            self._delivering = None

    def _listed_anew(self, key: Key) -> bool:
        """Whether ``key`` is being put or removed by its scope's list (:meth:`list_event`)
        and was not written since the list began: what it finds is the truth, whatever the
        versions."""
        scope = self._delivering
        if scope is None or scope[0] != key[0] or scope[1] not in (None, key[1]):
            return False
        written = self._listing.get(scope)
        return written is not None and key not in written

    def _touch(self, key: Key) -> None:
        """Record that ``key`` is written while its scope is listed."""
        for (kind, namespace), written in self._listing.items():
            if kind == key[0] and namespace in (None, key[1]):
                written.add(key)

    def forget(self, kind: str, namespace: str | None, name: str) -> None:
        """Drop everything known about an object, tombstone included."""
        self._drop((kind, namespace, name))
        self._tombstones.pop((kind, namespace, name), None)

    def _drop(self, key: Key) -> None:
        current = self._objects.pop(key, None)
        if current is not None:
            self._index(key, current, add=False)
            for index in self._groups:
                if index.kind == key[0]:
                    self._place(index, key, None)
        names = self._names.get(key[:2])
        if names is not None:
            names.discard(key[2])
            if not names:
                del self._names[key[:2]]

    def namespaces(self, kind: str) -> list[str]:
        """The namespaces in which objects of ``kind`` are cached."""
        return sorted({ns for (k, ns) in self._names if k == kind and ns is not None})

    def mark_stale(self, kind: str, namespace: str | None, stale: bool) -> None:
        """Record whether the watch stream of ``kind`` in ``namespace`` (``None``: all) is
        failing, so that what the cache holds of them may be out of date."""
        if stale:
            self._stale.add((kind, namespace))
        else:
            self._stale.discard((kind, namespace))

    def is_current(self, kind: str, namespace: str | None) -> bool:
        """Whether the cache's view of ``kind`` in ``namespace`` is kept current: neither
        that namespace's stream nor the cluster-wide one is failing."""
        return (kind, namespace) not in self._stale and (kind, None) not in self._stale

    def clear(self) -> None:
        """Forget everything (a standby's view goes stale: it is relisted on activation)."""
        self._objects.clear()
        self._tombstones.clear()
        self._names.clear()
        self._labelled.clear()
        for index in self._groups:
            self._groups[index] = {}
            self._placed[index] = {}

    def items(self, kind: str) -> Iterator[tuple[Key, dict[str, Any]]]:
        """All cached objects of ``kind`` (without reading those of other kinds)."""
        keys = [
            (kind, namespace, name)
            for (cached, namespace), names in self._names.items()
            if cached == kind
            for name in names
        ]
        for key in keys:
            obj = self._objects.get(key)
            if obj is not None:
                yield key, obj

    def keys(self, kind: str, namespace: str | None) -> list[tuple[str, str]]:
        """The ``(namespace, name)`` of the cached objects of ``kind`` in ``namespace``, or
        in every namespace if it is ``None`` (cluster-scoped objects have namespace ``""``)."""
        if namespace is not None:
            return [(namespace, name) for name in self._names.get((kind, namespace), ())]
        return [
            (scope or "", name)
            for (cached, scope), names in self._names.items()
            if cached == kind
            for name in names
        ]

    def in_namespace(self, kind: str, namespace: str | None) -> list[dict[str, Any]]:
        """The cached objects of ``kind`` in ``namespace`` (without scanning the others)."""
        names = sorted(self._names.get((kind, namespace), ()))
        return [self._objects[(kind, namespace, name)] for name in names]

    def labelled(
        self, kind: str, namespace: str | None, label: str, value: str
    ) -> list[dict[str, Any]]:
        """The cached objects of ``kind`` in ``namespace`` whose ``label`` is ``value``, by
        name; ``label`` must be one of :data:`INDEXED_LABELS`."""
        if label not in INDEXED_LABELS:
            raise ValueError(f"the cache does not index the label {label}")
        names = sorted(self._labelled.get((kind, namespace, label, value), ()))
        return [self._objects[(kind, namespace, name)] for name in names]

    def count_labelled(self, kind: str, namespace: str | None, label: str, value: str) -> int:
        """How many objects :meth:`labelled` would return, without reading them."""
        if label not in INDEXED_LABELS:
            raise ValueError(f"the cache does not index the label {label}")
        return len(self._labelled.get((kind, namespace, label, value), ()))
