"""Growing a PVC whose spec asks for more: one patch, and a refusal not asked again on
every pass.

A storage class without ``allowVolumeExpansion`` refuses every resize the same way, and so
does a ResourceQuota or LimitRange the size exceeds; sent on each pass, the refused patch
would be one write per pass for nothing. A refusal is remembered for
:data:`RETRY_REFUSED_AFTER` (the class or the quota may be changed meanwhile), per sandbox,
volume and size; a larger size is asked at once. Its message is the API server's, with the
storage class named only when that message is about expansion not being supported.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from craft_operator.kube import kinds
from craft_operator.kube.client import ApiError, ConflictError
from craft_operator.reconciler.children import as_seen
from craft_operator.reconciler.step import Pass, Refusal

PVC = kinds.PVC
#: Statuses with which the API server refuses to expand a claim (its storage class has no
#: allowVolumeExpansion, the claim is not bound yet, a quota or admission forbids it).
RESIZE_REFUSED = (403, 422)
#: The words (lower case) of a refusal because the claim's storage class does not allow
#: expansion: the PersistentVolumeClaimResize admission plugin's "only dynamically
#: provisioned pvc can be resized and the storageclass that provisions the pvc must support
#: resize". A quota's "exceeded quota", a LimitRange's "maximum storage usage per
#: PersistentVolumeClaim", an unbound claim's "spec is immutable ... for bound claims" are
#: no storage class's doing.
EXPANSION_UNSUPPORTED = ("must support resize", "allowvolumeexpansion")
#: How long a refused resize is left before it is asked again.
RETRY_REFUSED_AFTER = timedelta(minutes=5)


async def grow(
    p: Pass, pvc: dict[str, Any], size: str, *, what: str
) -> tuple[dict[str, Any], str | None]:
    """Ask for ``size`` (the pod keeps running; the volume grows online where supported).

    Returns the PVC and, when the API server refused (now, or within
    :data:`RETRY_REFUSED_AFTER` for this size), why, in words about ``what`` (``"the
    workspace"``). Any other failure raises :class:`ApiError`: a 409 when ``pvc`` changed
    or was replaced (someone else's of that name) since it was read, whose resize is never
    sent; it is then forgotten from the cache, to be read anew on the next pass.
    """
    meta = pvc["metadata"]
    name, now = meta["name"], p.run.now
    refused = p.memory.refused_resizes.setdefault(p.run.key, {})
    earlier = refused.get(name)
    if earlier is not None and earlier.size == size and now - earlier.at < RETRY_REFUSED_AFTER:
        p.run.revisit(after=(earlier.at + RETRY_REFUSED_AFTER - now).total_seconds())
        return pvc, earlier.message
    s = p.services
    patch = as_seen({"spec": {"resources": {"requests": {"storage": size}}}}, pvc)
    try:
        grown = await s.kube.patch(PVC.api, meta.get("namespace"), name, patch)
    except ConflictError:
        s.cache.forget(PVC.name, meta.get("namespace"), name)
        raise
    except ApiError as exc:
        if exc.status not in RESIZE_REFUSED:
            raise
        have = (pvc.get("spec", {}).get("resources", {}).get("requests") or {}).get("storage")
        message = (
            f"{what} cannot grow from {have} to {size}: the API server refused ({exc.message})"
        )
        if blames_the_storage_class(exc.message):
            message += "; the storage class must allow volume expansion"
        refused[name] = Refusal(size, now, message)
        p.run.revisit(after=RETRY_REFUSED_AFTER.total_seconds())  # asked again then
        return pvc, message
    refused.pop(name, None)
    s.cache.put(PVC.name, grown)
    return grown, None


def blames_the_storage_class(refusal: str) -> bool:
    """Whether the API server's ``refusal`` of a resize says the claim's storage class does
    not allow expansion (see :data:`EXPANSION_UNSUPPORTED`)."""
    words = refusal.lower()
    return any(phrase in words for phrase in EXPANSION_UNSUPPORTED)
