"""What the platform's CraftSandboxPolicy says of a pool's pod settings.

A pool's pods run on the operator's ServiceAccount, so whoever writes a CraftSandboxPool
would otherwise choose images, runtime classes, priority classes, tolerations and node
selectors that the platform refuses to sandboxes. The pool's settings are judged by the
same rules as a sandbox's (:func:`craft_operator.policy.rules.evaluate`, on the stand-in
sandbox the pool's pods are built from), field for field.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from craft_operator.api.pool import CraftSandboxPool
from craft_operator.builders.naming import SANDBOX_CONTAINER
from craft_operator.builders.pool import template_sandbox
from craft_operator.config import Settings
from craft_operator.kube.cache import ObjectCache
from craft_operator.policy.models import CraftSandboxPolicySpec
from craft_operator.policy.rules import Violation, describe, evaluate, image_permitted
from craft_operator.reconciler.policy_step import read_policy

#: The fields a pool shares with a sandbox that the policy judges.
POOL_FIELDS = frozenset(
    {
        "spec.image",
        "spec.runtimeClassName",
        "spec.priorityClassName",
        "spec.tolerations",
        "spec.nodeSelector",
    }
)


@dataclass(frozen=True)
class PoolVerdict:
    """Why the pool may not have pods of its settings (``message``), and whether only
    because the policy object is missing or unreadable (``absent``: its name for that)."""

    message: str
    absent: str | None


def pool_violations(
    pool: CraftSandboxPool,
    policy: CraftSandboxPolicySpec,
    settings: Settings,
    *,
    policy_missing: bool = False,
) -> list[Violation]:
    """What of the pool's pod settings ``policy`` does not allow (``policy_missing``: there
    is no CraftSandboxPolicy object, and the messages say so)."""
    sandbox = template_sandbox(pool.spec)
    return [
        violation
        for violation in evaluate(
            sandbox, policy, namespace_labels={}, settings=settings, policy_missing=policy_missing
        )
        if violation.field.split("[", 1)[0] in POOL_FIELDS  # spec.tolerations[0] too
    ]


def judge_pool(
    pool: CraftSandboxPool, cache: ObjectCache, settings: Settings
) -> PoolVerdict | None:
    """``None`` if the policy allows the pool's pod settings, else why not."""
    policy = read_policy(cache)
    found = pool_violations(pool, policy.spec, settings, policy_missing=policy.missing)
    if not found:
        return None
    return PoolVerdict(describe(found), policy.absent)


def images_denied(
    pods: Iterable[Mapping[str, Any]], cache: ObjectCache, settings: Settings
) -> list[Mapping[str, Any]]:
    """The pods (a pool's, of an earlier template) whose sandbox image the policy, present
    and readable, no longer allows: a rolling update must not keep them until their
    replacements are Ready (an image banned for a CVE). Their other settings are the
    pool's own earlier ones, judged when they were the pool's."""
    policy = read_policy(cache)
    if policy.absent is not None:
        return []
    denied = []
    for pod in pods:
        containers = (pod.get("spec") or {}).get("containers") or []
        image = next(
            (c.get("image") for c in containers if c.get("name") == SANDBOX_CONTAINER), None
        )
        if image and not image_permitted(image, policy.spec, settings):
            denied.append(pod)
    return denied
