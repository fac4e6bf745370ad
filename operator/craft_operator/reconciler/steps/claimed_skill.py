"""The SKILL.md of a claimed pool pod: written into it by exec, as the ConfigMap has it.

A pod created for the sandbox mounts the skill ConfigMap; a claimed pool pod was created
before its user was known and mounts an emptyDir there instead. This step writes the
ConfigMap's SKILL.md into it, once per pod and content (``status.deliveredSkill``), so a
changed skill reaches a claimed pod too. Failures are reported on SkillRendered.
"""

from __future__ import annotations

import hashlib

from craft_operator.api.models import DeliveredSkill
from craft_operator.api.pool import LABEL_CLAIMED_FROM
from craft_operator.builders.naming import SANDBOX_CONTAINER, SKILL_KEY, skills_configmap_name
from craft_operator.builders.pod import SKILLS_MOUNT
from craft_operator.kube import kinds
from craft_operator.kube.exec import ExecError
from craft_operator.reconciler.step import Pass, Step, Stop
from craft_operator.status import SKILL_RENDERED

#: Write stdin to the file atomically; the path is an argument, the content on stdin.
DELIVER_ARGV = (
    "sh",
    "-c",
    'umask 022 && mkdir -p "${1%/*}" && cat > "$1.new" && mv -f "$1.new" "$1"',
    "deliver-skill",
    f"{SKILLS_MOUNT}/{SKILL_KEY}",
)
TIMEOUT = 10.0
WAITING = "WaitingForSkill"


async def deliver_skill(p: Pass) -> Stop | None:
    """Write the skill into a claimed pod if it is not there at this content yet."""
    assert p.pod is not None, "the pod step runs first"
    meta = p.pod["metadata"]
    if LABEL_CLAIMED_FROM not in (meta.get("labels") or {}):
        return None  # the pod mounts the ConfigMap
    configmap = p.services.cache.get(
        kinds.CONFIGMAP.name, p.sandbox.metadata.namespace, skills_configmap_name(p.sandbox)
    )
    text = ((configmap or {}).get("data") or {}).get(SKILL_KEY)
    if text is None:
        return None  # the skill step reports why there is none
    wanted = DeliveredSkill(pod_uid=meta.get("uid"), content_hash=_digest(text))
    if p.run.status.delivered_skill == wanted:
        return None
    try:
        result = await p.services.exec.run(
            meta.get("namespace", ""),
            meta["name"],
            SANDBOX_CONTAINER,
            list(DELIVER_ARGV),
            stdin=text.encode(),
            timeout=TIMEOUT,
            max_output_bytes=64 * 1024,
        )
    except ExecError as exc:
        return p.fail(SKILL_RENDERED, "SkillDeliveryFailed", str(exc))
    if result.exit_code != 0:
        detail = f"could not write SKILL.md into pod {meta['name']} (exit {result.exit_code})"
        return p.fail(SKILL_RENDERED, "SkillDeliveryFailed", detail)
    p.run.status.delivered_skill = wanted
    return None


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


#: Owns no condition: its failures are reported on SkillRendered.
STEP = Step(None, deliver_skill)
