"""Converge one child object (Secret, ConfigMap) to its desired form, writing only on drift."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from craft_operator.kube.cache import ObjectCache
from craft_operator.kube.client import ConflictError, Kind, KubeClient
from craft_operator.status import merge_patch

Action = Literal["created", "updated", "unchanged"]


@dataclass(frozen=True)
class Converged:
    """The object as the API now has it, and what it took to get there."""

    obj: dict[str, Any]
    action: Action
    fields: tuple[str, ...] = ()


class ForeignObjectError(Exception):
    """A child's name is taken by an object the operator does not manage; it is left alone.

    ``leaving``: that object is being deleted (an earlier sandbox's of this name, say), so
    the name frees itself; nobody has to change anything. Unless it stays: the message then
    says since when, and which finalizers hold it, for whoever has to look."""

    def __init__(
        self,
        kind: str,
        namespace: str | None,
        name: str,
        *,
        leaving: bool = False,
        since: str = "",
        finalizers: Sequence[str] = (),
    ) -> None:
        if leaving:
            message = (
                f"{kind} {namespace}/{name} of another object (an earlier sandbox of this "
                f"name, say) is still being deleted{_held(since, finalizers)}: retried "
                "until this sandbox's can be made"
            )
        else:
            message = (
                f"{kind} {namespace}/{name} exists but is not managed by this CraftSandbox "
                "(it has no owner reference to it) and is left alone; rename or delete it"
            )
        super().__init__(message)
        self.kind, self.namespace, self.name, self.leaving = kind, namespace, name, leaving

    def reason(self, label: str) -> str:
        """The condition's reason for a child called ``label`` in reasons: ``<label>NameTaken``
        (someone has to act), or ``<label>Terminating`` (it frees itself; retried)."""
        return f"{label}Terminating" if self.leaving else f"{label}NameTaken"

    @classmethod
    def of(cls, kind: str, found: Mapping[str, Any]) -> ForeignObjectError:
        """The error for ``found``, an object of ``kind`` that is not ours."""
        meta = found.get("metadata") or {}
        deleted = meta.get("deletionTimestamp")
        finalizers = meta.get("finalizers")
        return cls(
            kind,
            meta.get("namespace"),
            str(meta.get("name")),
            leaving=bool(deleted),
            since=str(deleted or ""),
            finalizers=[str(f) for f in finalizers] if isinstance(finalizers, list) else (),
        )


#: Finalizers named in a message at most; the API server allows many, each up to 316 bytes.
NAMED_FINALIZERS = 4


def _held(since: str, finalizers: Sequence[str]) -> str:
    """`` (since <time>; held by finalizers a, b)``: what keeps an object being deleted, the
    same words on every pass while it stays (so its Warning event is one, counted)."""
    said = [f"since {since[:40]}"] if since else []
    if finalizers:
        named = ", ".join(f[:80] for f in finalizers[:NAMED_FINALIZERS])
        more = len(finalizers) - NAMED_FINALIZERS
        said.append(f"held by finalizers {named}" + (f" and {more} more" if more > 0 else ""))
    return f" ({'; '.join(said)})" if said else ""


def controlled_by(obj: Mapping[str, Any], uid: str | None) -> bool:
    """Whether ``obj`` has a controller reference to the owner ``uid`` (never for no uid).

    Only the controller reference, which the operator (or the Job controller) sets, counts.
    Labels never do, nor a plain owner reference: anyone who can create a Pod or a Secret
    can copy labels or name the sandbox as a (non-controlling) owner, and adopting such an
    object would write the sandbox's token into it or delete it with the sandbox.
    """
    refs = obj.get("metadata", {}).get("ownerReferences") or []
    return bool(uid) and any(ref.get("controller") and ref.get("uid") == uid for ref in refs)


def is_ours(actual: Mapping[str, Any], desired: Mapping[str, Any]) -> bool:
    """Whether ``actual`` belongs to the owner ``desired`` is built for (see
    :func:`controlled_by`)."""
    owners = desired.get("metadata", {}).get("ownerReferences") or []
    return any(controlled_by(actual, ref.get("uid")) for ref in owners)


def drift_patch(actual: Mapping[str, Any], desired: Mapping[str, Any]) -> dict[str, Any]:
    """The merge patch that puts back what the operator owns in ``actual`` (empty: none).

    Owned: the whole ``data`` (and ``type``), our labels and annotations, our owner
    reference. Labels, annotations and owner references others added are left alone.
    """
    patch: dict[str, Any] = {}
    if "data" in desired:
        change = merge_patch(actual.get("data") or {}, desired["data"])
        if change:
            patch["data"] = change
    if "type" in desired and actual.get("type") != desired["type"]:
        patch["type"] = desired["type"]
    actual_meta = actual.get("metadata", {})
    desired_meta = desired.get("metadata", {})
    meta_patch: dict[str, Any] = {}
    for field in ("labels", "annotations"):
        have = actual_meta.get(field) or {}
        want = desired_meta.get(field) or {}
        changed = {key: value for key, value in want.items() if have.get(key) != value}
        if changed:
            meta_patch[field] = changed
    owners = actual_meta.get("ownerReferences") or []
    for owner in desired_meta.get("ownerReferences") or []:
        if not any(existing.get("uid") == owner.get("uid") for existing in owners):
            meta_patch["ownerReferences"] = [*owners, owner]
    if meta_patch:
        patch["metadata"] = meta_patch
    return patch


async def converge(
    kube: KubeClient, cache: ObjectCache, kind: Kind, cache_kind: str, desired: dict[str, Any]
) -> Converged:
    """Create ``desired`` if missing, patch it back if it drifted, else do nothing."""
    meta = desired["metadata"]
    namespace, name = meta.get("namespace"), meta["name"]
    actual = cache.get(cache_kind, namespace, name)
    if actual is None:
        try:
            created = await kube.create(kind, desired)
        except ConflictError:
            # It exists but our cache has not seen it yet (or we restarted mid-write), or
            # it is someone else's: only ours goes into the cache.
            actual = await kube.get(kind, namespace, name)
            if not is_ours(actual, desired):
                raise ForeignObjectError.of(str(desired.get("kind")), actual) from None
            cache.put(cache_kind, actual, read=True)
        else:
            cache.put(cache_kind, created)
            return Converged(created, "created")
    if not is_ours(actual, desired):
        raise ForeignObjectError.of(str(desired.get("kind")), actual)
    patch = drift_patch(actual, desired)
    if not patch:
        return Converged(actual, "unchanged")
    try:
        updated = await kube.patch(kind, namespace, name, as_seen(patch, actual))
    except ConflictError:
        # Changed since the cache saw it (a recreated sandbox's child of that name, say):
        # judged and patched again as it is now, never as it was.
        actual = await kube.get(kind, namespace, name)
        if not is_ours(actual, desired):
            raise ForeignObjectError.of(str(desired.get("kind")), actual) from None
        patch = drift_patch(actual, desired)
        if not patch:
            cache.put(cache_kind, actual, read=True)
            return Converged(actual, "unchanged")
        updated = await kube.patch(kind, namespace, name, as_seen(patch, actual))
    cache.put(cache_kind, updated)
    return Converged(updated, "updated", tuple(sorted(patch)))


def as_seen(patch: Mapping[str, Any], actual: Mapping[str, Any]) -> dict[str, Any]:
    """``patch``, applied only to ``actual`` as read (its resourceVersion): what it puts
    back (data, labels, an owner reference list) must not land on a newer object, another
    sandbox's of that name perhaps (409 Conflict instead)."""
    version = actual.get("metadata", {}).get("resourceVersion")
    if not version:
        return dict(patch)
    return {**patch, "metadata": {**patch.get("metadata", {}), "resourceVersion": version}}
