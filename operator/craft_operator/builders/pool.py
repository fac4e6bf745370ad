"""A pool's warm pod: the sandbox's container and security, with nobody's data in it.

A pool pod is what a sandbox pod would be before it knows its user: the same image, server
URL, resources, scheduling and restricted security contexts, built by the same helpers as
:func:`craft_operator.builders.pod.build_pod`. It holds no user label, no credentials, no
skill ConfigMap and no library volume: the skills directory and the user library are
emptyDirs, and the token is written at claim time into ``onyx-credentials``, a small
memory-backed emptyDir at ``/run/onyx``, so it never reaches a disk or the pod spec.

The ``craft.onyx.app/pool-template-hash`` label is the hash of the pod spec. A sandbox's
own settings give the same hash exactly when a pool pod is what its pod would be
(:func:`sandbox_template_hash`), which is how a claim finds a matching pool.
"""

from __future__ import annotations

import json
from enum import Enum
from typing import Any

from craft_operator.api import models
from craft_operator.api.models import CraftSandbox, CraftSandboxSpec, ObjectMeta, UserRef
from craft_operator.api.pool import (
    LABEL_POOL,
    LABEL_POOL_TEMPLATE_HASH,
    POOL_KIND,
    CraftSandboxPool,
    CraftSandboxPoolSpec,
)
from craft_operator.builders.naming import (
    APP_NAME,
    LABEL_COMPONENT,
    LABEL_MANAGED_BY,
    MANAGED_BY,
)
from craft_operator.builders.pod import (
    LIBRARY_MOUNT,
    SKILLS_MOUNT,
    SandboxConfigError,
    sandbox_container,
    scheduling,
    template_hash,
)
from craft_operator.builders.quantities import canonical_resources
from craft_operator.builders.security import pod_security_context
from craft_operator.config import Settings

#: Where the token is written at claim time (a memory-backed emptyDir).
CREDENTIALS_VOLUME = "onyx-credentials"
CREDENTIALS_MOUNT = "/run/onyx"
CREDENTIALS_SIZE_LIMIT = "1Mi"
#: The stand-in user of a pool's template: a pool pod has no user, and this one never
#: leaves this module (it only lets the sandbox's own builders read the pool's settings).
_NOBODY = "00000000-0000-0000-0000-000000000000"


def template_sandbox(spec: CraftSandboxPoolSpec) -> CraftSandbox:
    """A sandbox with the pool's pod settings and nothing else, for the pod helpers (and
    for the platform's policy, which judges a pool's pod settings as a sandbox's)."""
    return CraftSandbox(
        metadata=ObjectMeta(name="pool-template"),
        spec=CraftSandboxSpec(
            user=UserRef(id=_NOBODY),
            image=spec.image,
            resources=spec.resources,
            runtime_class_name=spec.runtime_class_name,
            node_selector=spec.node_selector,
            tolerations=spec.tolerations,
            priority_class_name=spec.priority_class_name,
        ),
    )


class Form(Enum):
    """How a pool pod's settings are written into its spec (and so its template hash): in
    canonical form now; as older operators wrote them, whose pods a claim still takes, and
    a claimed one is kept, until its pool has replaced them."""

    CANONICAL = "canonical"
    #: Operators from 36ad2a8 to 2026-11-28 (afternoon): as canonical, but each quantity in
    #: the API server's form of its spelling (``4294967296`` and ``4Gi`` apart).
    QUANTITIES_AS_SPELLED = "quantities as spelled"
    #: Operators from 3e80fde to 36ad2a8 (2026-11-28): as that, but a toleration's
    #: empty fields (``key: ""``, ``value: ""``) kept.
    TOLERATIONS_WITH_EMPTY_FIELDS = "tolerations with empty fields"
    #: Before 2026-11-28: quantities canonical, tolerations as written.
    TOLERATIONS_AS_WRITTEN = "tolerations as written"
    #: Before 2026-11-27: quantities and tolerations as written.
    AS_WRITTEN = "as written"


def canonical_tolerations(
    tolerations: list[dict[str, Any]], *, drop_empty: bool = True
) -> list[dict[str, Any]]:
    """``tolerations`` as one form of what they mean: without empty fields (``key: ""``
    with ``Exists`` is any key, as no key is; an empty value or effect is none),
    ``operator: Equal`` spelled out where it is the default (a key and no operator), without
    repeats, in a stable order. A pool and a sandbox that list the same tolerations
    otherwise want the same pod. (``drop_empty=False``: as operators before wrote them.)"""
    spelled = []
    for toleration in tolerations:
        if drop_empty:
            toleration = {k: v for k, v in toleration.items() if v is not None and v != ""}
        if toleration.get("key") and not toleration.get("operator"):
            toleration = {**toleration, "operator": "Equal"}
        spelled.append(dict(toleration))
    unique = {json.dumps(t, sort_keys=True, separators=(",", ":")): t for t in spelled}
    return [unique[key] for key in sorted(unique)]


def _pod_spec(
    sandbox: CraftSandbox, settings: Settings, *, form: Form = Form.CANONICAL
) -> dict[str, Any]:
    """The spec of a pool pod for ``sandbox``'s pod settings (raises ``SandboxConfigError``).

    Its quantities and tolerations are in canonical form (:class:`Form`): a pool that says
    ``cpu: 500m`` and a sandbox that says ``cpu: "0.5"`` (or ``memory: 4Gi`` and
    ``memory: "4294967296"``), or that list the same tolerations in another order, want the
    same pod.
    """
    # Writable: the claim writes SKILL.md, the token and the library by exec.
    container = sandbox_container(
        sandbox,
        settings,
        [
            {"name": "skills", "mountPath": SKILLS_MOUNT},
            {"name": "user-library", "mountPath": LIBRARY_MOUNT},
            {"name": CREDENTIALS_VOLUME, "mountPath": CREDENTIALS_MOUNT},
        ],
    )
    if form is not Form.AS_WRITTEN:
        container["resources"] = canonical_resources(
            container["resources"], by_value=form is Form.CANONICAL
        )
    placement = scheduling(sandbox.spec)
    if form not in (Form.TOLERATIONS_AS_WRITTEN, Form.AS_WRITTEN) and "tolerations" in placement:
        placement["tolerations"] = canonical_tolerations(
            placement["tolerations"], drop_empty=form is not Form.TOLERATIONS_WITH_EMPTY_FIELDS
        )
    return {
        "restartPolicy": "Never",
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "securityContext": pod_security_context(),
        "containers": [container],
        "volumes": [
            {"name": "skills", "emptyDir": {}},
            {"name": "user-library", "emptyDir": {}},
            {
                "name": CREDENTIALS_VOLUME,
                "emptyDir": {"medium": "Memory", "sizeLimit": CREDENTIALS_SIZE_LIMIT},
            },
        ],
        **placement,
    }


def pool_pod_spec(spec: CraftSandboxPoolSpec, settings: Settings) -> dict[str, Any]:
    """The pod spec of the pool's pods (``SandboxConfigError`` if the settings cannot make one,
    e.g. no server URL, or requests above limits)."""
    try:
        return _pod_spec(template_sandbox(spec), settings)
    except SandboxConfigError as exc:
        if exc.reason == "NoServerURL":
            # A pool has no spec.serverURL: the sandbox's advice would name a field it lacks.
            message = "no Onyx server URL: set the operator's CRAFT_SERVER_URL"
            raise SandboxConfigError(exc.reason, message) from None
        raise


def pool_template_hash(spec: CraftSandboxPoolSpec, settings: Settings) -> str:
    """The hash its pods carry in ``craft.onyx.app/pool-template-hash``."""
    return template_hash(pool_pod_spec(spec, settings))


def claimable_pod_spec(sandbox: CraftSandbox, settings: Settings) -> dict[str, Any]:
    """The spec of the pool pods ``sandbox`` may claim: a pool pod of its image, server URL,
    resources and scheduling, as the pool builds it (raises ``SandboxConfigError``)."""
    return _pod_spec(sandbox, settings)


def sandbox_template_hash(sandbox: CraftSandbox, settings: Settings) -> str:
    """The template hash of the pool pods ``sandbox`` may claim: equal to a pool's
    :func:`pool_template_hash` exactly when that pool's pods have the image, server URL,
    resources and scheduling the sandbox's own pod would have."""
    return template_hash(claimable_pod_spec(sandbox, settings))


def older_template_hashes(sandbox: CraftSandbox, settings: Settings) -> tuple[str, ...]:
    """The template hashes of the pool pods ``sandbox`` may claim as older operators
    computed them (:class:`Form`), newest first, without the current one: the pods of a pool
    made before carry them until the pool has replaced them."""
    current = sandbox_template_hash(sandbox, settings)
    older = []
    for form in list(Form)[1:]:
        hash_ = template_hash(_pod_spec(sandbox, settings, form=form))
        if hash_ != current and hash_ not in older:
            older.append(hash_)
    return tuple(older)


def claimed_template_hashes(sandbox: CraftSandbox, settings: Settings) -> frozenset[str]:
    """The template hashes a pod ``sandbox`` claimed may carry and still be its pod: the
    current one, and those older operators computed (a pod claimed before its settings were
    hashed in canonical form is not replaced for it)."""
    return frozenset(
        {sandbox_template_hash(sandbox, settings), *older_template_hashes(sandbox, settings)}
    )


#: The pod-level settings a claim must match, as the pod spec names them.
_POD_SETTINGS = ("runtimeClassName", "nodeSelector", "tolerations", "priorityClassName")


def differing_settings(mine: dict[str, Any], pools: dict[str, Any]) -> list[str]:
    """Which pod settings make the pool pod spec ``pools`` unlike ``mine`` (a sandbox's
    :func:`claimable_pod_spec`), by their CraftSandbox field names, for a message."""
    ours, theirs = mine["containers"][0], pools["containers"][0]
    found = [
        field
        for field, key in (("image", "image"), ("resources", "resources"), ("serverURL", "env"))
        if ours.get(key) != theirs.get(key)
    ]
    found += [field for field in _POD_SETTINGS if mine.get(field) != pools.get(field)]
    return found


def pool_owner_reference(pool: CraftSandboxPool) -> dict[str, Any]:
    """The controller ownerReference that ties an unclaimed pod to its pool."""
    return {
        "apiVersion": models.API_VERSION,
        "kind": POOL_KIND,
        "name": pool.metadata.name,
        "uid": pool.metadata.uid or "",
        "controller": True,
        "blockOwnerDeletion": True,
    }


def pool_pod_labels(pool_name: str, hash_: str) -> dict[str, str]:
    """The labels of a pool's unclaimed pod: no user, no sandbox, only the pool.

    ``app.kubernetes.io/component: sandbox`` puts it under the sandboxes' NetworkPolicies.
    """
    return {
        "app.kubernetes.io/name": APP_NAME,
        LABEL_MANAGED_BY: MANAGED_BY,
        LABEL_COMPONENT: "sandbox",
        LABEL_POOL: pool_name,
        LABEL_POOL_TEMPLATE_HASH: hash_,
    }


def build_pool_pod(pool: CraftSandboxPool, settings: Settings) -> dict[str, Any]:
    """One new pod of ``pool`` (named by the API server: ``<pool>-xxxxx``)."""
    spec = pool_pod_spec(pool.spec, settings)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "generateName": f"{pool.metadata.name}-",
            "namespace": pool.metadata.namespace,
            "labels": pool_pod_labels(pool.metadata.name, template_hash(spec)),
            "ownerReferences": [pool_owner_reference(pool)],
        },
        "spec": spec,
    }
