"""The SKILL.md of a claimed pool pod: written into it by exec, as the ConfigMap has it.

A pod created for the sandbox mounts the skill ConfigMap; a claimed pool pod was created
before its user was known and mounts an emptyDir there instead. This step writes the
ConfigMap's SKILL.md into it, once per pod and content (``status.deliveredSkill``), so a
changed skill reaches a claimed pod too. When the PAT is delivered in the same pass (a new
claim, a renewal), the CLIValidated step carries the SKILL.md in its exec instead (one
exec, not two; :func:`pending_skill`). Failures are reported on SkillRendered.

The pod's agent can stall that exec (stop its shell) until its timeout, so it runs as the
PAT's delivery does (:mod:`craft_operator.reconciler.detached`): waited for a little by the
pass, then on without it, among the deliveries' bounded places, and after a failure only
once its backoff has passed, however many events bring the sandbox back meanwhile.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from craft_operator.api.models import DeliveredSkill
from craft_operator.api.pool import LABEL_CLAIMED_FROM
from craft_operator.builders.naming import SANDBOX_CONTAINER, SKILL_KEY, skills_configmap_name
from craft_operator.builders.pod import SKILLS_MOUNT
from craft_operator.kube import kinds
from craft_operator.kube.exec import ExecError, ExecResult
from craft_operator.reconciler.children import controlled_by
from craft_operator.reconciler.pod_guard import exec_into_pod_of
from craft_operator.reconciler.step import Pass, Step, Stop
from craft_operator.status import SKILL_RENDERED, ConditionState, find_condition

#: Where a claimed pod's SKILL.md goes.
SKILL_FILE = f"{SKILLS_MOUNT}/{SKILL_KEY}"
#: ``has_size FILE N``: whether FILE holds exactly N bytes (its N-th byte is there, its
#: N+1-th is not), with ``dd`` alone, which the sandbox image promises. A byte read into a
#: command substitution is followed by a "." there, so that a newline counts too (a NUL
#: last byte does not: such a file is refused, never cut).
HAS_SIZE_FUNCTION = """\
has_size() {
  case $2 in ''|*[!0-9]*) return 1 ;; esac
  [ "$(dd if="$1" bs=1 skip="$2" count=1 2>/dev/null; echo .)" = . ] || return 1
  [ "$2" -eq 0 ] || [ "$(dd if="$1" bs=1 skip="$(($2 - 1))" count=1 2>/dev/null; echo .)" != . ]
}"""


def write_skill(failed: int) -> str:
    """Commands that write stdin to the file ``$1`` atomically (``mv -T``: never into a
    directory planted there), readable by all (the agent reads it), once it holds all
    ``$2`` bytes, or exit ``failed``: an exec whose client went away is not ended, its stdin
    is, so the end of stdin does not mean that all of it came. Through a file of this
    shell's own (a cancelled delivery's shell may still be writing), removed if it is not
    installed. A shell that cannot fork (the pod's pids limit reached by the agent's
    processes) ends at once, with 2, and runs only its EXIT trap: that trap says ``failed``
    until the file is in place, as 2 would read as onyx-cli's own code after a PAT."""
    return (
        f'umask 022 && skill_tmp="$1.$$" && trap \'exit {failed}\' EXIT && mkdir -p "${{1%/*}}" '
        '&& cat > "$skill_tmp" && has_size "$skill_tmp" "$2" && mv -fT "$skill_tmp" "$1" '
        f'&& trap - EXIT || {{ rm -f "$skill_tmp"; exit {failed}; }}'
    )


WRITE_SKILL_SCRIPT = f"{HAS_SIZE_FUNCTION}\n{write_skill(1)}"
TIMEOUT = 10.0
#: How the deliveries' failures of a standalone SKILL.md write are told from the PAT's.
SKILL_TARGET = "skill|"
WAITING = "WaitingForSkill"
DELIVERY_FAILED = "SkillDeliveryFailed"


@dataclass(frozen=True)
class PendingSkill:
    """A SKILL.md a claimed pod does not hold yet, and what status records once it does."""

    text: bytes
    delivered: DeliveredSkill


def deliver_argv(skill_bytes: int) -> tuple[str, ...]:
    """The exec that writes a SKILL.md of ``skill_bytes`` bytes, sent on its stdin."""
    return ("sh", "-c", WRITE_SKILL_SCRIPT, "deliver-skill", SKILL_FILE, str(skill_bytes))


def pending_skill(p: Pass) -> PendingSkill | None:
    """The SKILL.md the claimed pod still needs, if it is a claimed pod and needs one."""
    assert p.pod is not None, "the pod step runs first"
    meta = p.pod["metadata"]
    if LABEL_CLAIMED_FROM not in (meta.get("labels") or {}):
        return None  # the pod mounts the ConfigMap
    configmap = p.services.cache.get(
        kinds.CONFIGMAP.name, p.sandbox.metadata.namespace, skills_configmap_name(p.sandbox)
    )
    if configmap is not None and not controlled_by(configmap, p.sandbox.metadata.uid):
        return None  # someone else's by that name: the skill step reports it
    text = ((configmap or {}).get("data") or {}).get(SKILL_KEY)
    if text is None:
        return None  # the skill step reports why there is none
    wanted = DeliveredSkill(pod_uid=meta.get("uid"), content_hash=_digest(text))
    if p.run.status.delivered_skill == wanted:
        return None
    return PendingSkill(text.encode(), wanted)


def skill_failed(p: Pass, detail: str) -> Stop:
    """Report on SkillRendered that the SKILL.md could not be written into the pod."""
    return p.fail(SKILL_RENDERED, DELIVERY_FAILED, detail)


def _failed_this_pass(p: Pass) -> bool:
    # The skill step sets SkillRendered on every pass before this row runs, so this
    # reason can only be the CLIValidated step's, a moment ago.
    condition = p.run.condition(SKILL_RENDERED)
    return condition is not None and condition.reason == DELIVERY_FAILED


async def deliver_skill(p: Pass) -> Stop | None:
    """Write the skill into a claimed pod if it is not there at this content yet (unless
    the CLIValidated step, which runs first, carried it with the PAT this pass, failed to,
    or runs on without the pass: the next pass tries again, after the backoff)."""
    pending, deliveries, key = pending_skill(p), p.services.deliveries, p.run.key
    if pending is None or _failed_this_pass(p):
        return None
    assert p.pod is not None
    meta = p.pod["metadata"]
    target = f"{SKILL_TARGET}{meta.get('uid', '')}|{pending.delivered.content_hash}"
    if deliveries.running(key):
        # A PAT delivery running carries it, and this one's own running on ends with a
        # wake (these in case the wake is lost).
        _keep_failure(p)
        p.run.revisit(after=TIMEOUT + 5)
        return None
    failed = deliveries.failed_target(key)
    if failed is not None and (failed[0] == target or not failed[0].startswith(SKILL_TARGET)):
        # This write failed, or the PAT's delivery did (a pod that stalls one exec would
        # stall this one): both wait for the backoff; a skill edited since is tried now.
        _keep_failure(p)
        p.run.revisit(after=failed[1])
        return None
    exec_ = exec_into_pod_of(p)  # it may run a while from now: only into this very pod

    async def write() -> ExecResult:
        result = await exec_.run(
            meta.get("namespace", ""),
            meta["name"],
            SANDBOX_CONTAINER,
            list(deliver_argv(len(pending.text))),
            stdin=pending.text,
            timeout=TIMEOUT,
            max_output_bytes=64 * 1024,
        )
        return ExecResult(result.exit_code, b"", b"")  # nothing else is read

    try:
        result = await deliveries.result(key, target, write, owner=meta.get("uid", ""))
    except ExecError as exc:
        deliveries.failed(key, target)
        return skill_failed(p, str(exc))
    if result is None:
        _keep_failure(p)  # it runs on, or waits for room: its end wakes the sandbox
        p.run.revisit(after=TIMEOUT + 5)
        return None
    if result.exit_code != 0:
        deliveries.failed(key, target)
        return skill_failed(
            p, f"could not write SKILL.md into pod {meta['name']} (exit {result.exit_code})"
        )
    deliveries.clear_failures(key)
    p.run.status.delivered_skill = pending.delivered
    return None


def _keep_failure(p: Pass) -> None:
    """While the SKILL.md waits for a delivery, a failure to write it that the status says
    still holds: the skill step rendered it (True), which is not the pod having it."""
    stored = find_condition(p.run.old_status.conditions, SKILL_RENDERED)
    if stored is not None and stored.reason == DELIVERY_FAILED:
        p.run.set(ConditionState.false(SKILL_RENDERED, DELIVERY_FAILED, stored.message))


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


#: Owns no condition: its failures are reported on SkillRendered.
STEP = Step(None, deliver_skill)
