"""An in-memory cache of the objects the operator watches, fed by watch events and writes.

The reconciler reads children from here instead of the API: a resync of thousands of
sandboxes with nothing to do then costs no API calls at all. Our own writes go in as soon
as the API answers (write-through), so the next reconcile does not act on a stale view
while the watch event is still on its way; an older event never overwrites a newer object.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from craft_operator.api.constants import LABEL_SANDBOX
from craft_operator.api.pool import LABEL_CLAIMED_FROM, LABEL_POOL

Key = tuple[str, str | None, str]
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


def _trimmed(obj: Mapping[str, Any]) -> dict[str, Any]:
    """The object without its managed fields, which the operator never reads (and which
    are often bigger than the rest of the object)."""
    trimmed = dict(obj)
    meta = trimmed.get("metadata")
    if isinstance(meta, Mapping) and "managedFields" in meta:
        trimmed["metadata"] = {k: v for k, v in meta.items() if k != "managedFields"}
    return trimmed


class ObjectCache:
    """Latest known object per (kind, namespace, name)."""

    def __init__(self) -> None:
        self._objects: dict[Key, dict[str, Any]] = {}
        self._tombstones: dict[Key, int] = {}
        #: The names of the cached objects per (kind, namespace).
        self._names: dict[tuple[str, str | None], set[str]] = {}
        #: The names per (kind, namespace, label, value) of the :data:`INDEXED_LABELS`.
        self._labelled: dict[LabelKey, set[str]] = {}

    def __len__(self) -> int:
        return len(self._objects)

    def get(self, kind: str, namespace: str | None, name: str) -> dict[str, Any] | None:
        """The cached object, or ``None`` if it is not known to exist."""
        return self._objects.get((kind, namespace, name))

    def put(self, kind: str, obj: Mapping[str, Any]) -> bool:
        """Record an object seen in a watch event or returned by a write.

        Returns whether it is news: False for an older version, or for the same version
        (the echo of the operator's own write, which it has already acted on).
        """
        meta = obj.get("metadata", {})
        key = (kind, meta.get("namespace"), meta["name"])
        incoming = _version(obj)
        current = self._objects.get(key)
        known = _version(current) if current is not None else self._tombstones.get(key)
        if incoming is not None and known is not None and incoming <= known:
            return False
        self._tombstones.pop(key, None)
        if current is not None:
            self._index(key, current, add=False)
        self._objects[key] = _trimmed(obj)
        self._names.setdefault(key[:2], set()).add(key[2])
        self._index(key, obj, add=True)
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

    def remove(self, kind: str, obj: Mapping[str, Any]) -> None:
        """Forget an object that was deleted (a later, older event cannot bring it back)."""
        meta = obj.get("metadata", {})
        key = (kind, meta.get("namespace"), meta["name"])
        current = self._objects.get(key)
        incoming = _version(obj)
        if current is not None and incoming is not None:
            known = _version(current)
            if known is not None and incoming < known:
                return  # a newer object of the same name exists already
        self._drop(key)
        if incoming is not None:
            self._tombstones[key] = incoming

    def forget(self, kind: str, namespace: str | None, name: str) -> None:
        """Drop everything known about an object, tombstone included."""
        self._drop((kind, namespace, name))
        self._tombstones.pop((kind, namespace, name), None)

    def _drop(self, key: Key) -> None:
        current = self._objects.pop(key, None)
        if current is not None:
            self._index(key, current, add=False)
        names = self._names.get(key[:2])
        if names is not None:
            names.discard(key[2])
            if not names:
                del self._names[key[:2]]

    def clear(self) -> None:
        """Forget everything (a standby's view goes stale: it is relisted on activation)."""
        self._objects.clear()
        self._tombstones.clear()
        self._names.clear()
        self._labelled.clear()

    def items(self, kind: str) -> Iterator[tuple[Key, dict[str, Any]]]:
        """All cached objects of ``kind``."""
        for key, obj in list(self._objects.items()):
            if key[0] == kind:
                yield key, obj

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
