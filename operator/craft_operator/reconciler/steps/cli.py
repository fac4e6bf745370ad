"""CLIValidated: the sandbox's PAT is in the Ready pod, and onyx-cli accepts it.

The PAT is not part of the pod spec: this step writes it into the running pod (a file on
the memory-backed volume at ``/run/onyx``, through exec, the token on stdin) and runs
``onyx-cli validate-config`` with it, once per pod and PAT. A renewed PAT is delivered the
same way, into the same pod: nothing restarts. A claimed pool pod's SKILL.md, if it still
needs one, rides in the same exec (after the PAT on stdin). Once onyx-cli has validated a
renewed PAT, the one it superseded is revoked (it expires at the end of its grace period
otherwise).
"""

from __future__ import annotations

import logging
import time
from datetime import timedelta

from craft_operator.api.models import ConditionStatus, CraftSandboxStatus
from craft_operator.builders.naming import SANDBOX_CONTAINER, pod_name
from craft_operator.builders.pod import PAT_FILE
from craft_operator.credentials.errors import CredentialsError
from craft_operator.kube import kinds
from craft_operator.kube.exec import ExecError, ExecResult
from craft_operator.metrics import ProvisioningPhase
from craft_operator.reconciler import cli_validation
from craft_operator.reconciler.children import controlled_by
from craft_operator.reconciler.pod_guard import exec_into_pod_of
from craft_operator.reconciler.ports import IssuedCredential
from craft_operator.reconciler.step import WAITING_MESSAGE, Pass, Step, Stop
from craft_operator.reconciler.steps import claimed_skill, credentials, pod_state
from craft_operator.status import CLI_VALIDATED, ConditionState

logger = logging.getLogger(__name__)
POD = kinds.POD
CLI_TIMEOUT = 60.0
#: onyx-cli prints a line or two; more is not read.
CLI_MAX_OUTPUT = 1024 * 1024
#: What is kept of a delivery's stderr, at its start (where onyx-cli says why) and at its
#: end (what an excerpt shows): its result may wait in memory for the sandbox's next pass,
#: a sleeping sandbox's for days, and the pod decides how much it prints.
KEPT_STDERR = 32 * 1024
#: The exit codes of the commands below when the PAT, or the SKILL.md it carries, could
#: not be written (onyx-cli's own codes are 0 to 9, and 127 when it is missing).
EXIT_NOT_DELIVERED = 90
EXIT_SKILL_NOT_DELIVERED = 91
#: CLIValidated's reason while a delivery runs on without the pass that started it.
VALIDATING = "Validating"
#: CLIValidated's reason while a failed delivery waits for its backoff, if an earlier row
#: stopped a pass since it failed (its own verdict stays otherwise).
RETRY_PENDING = "RetryPending"
#: Seconds before a delivery that found no room to run on is tried again, if no detached
#: delivery's end wakes it first.
WAITING_RETRY = 10.0


#: Beside the PAT file, when the delivery that installed it started: the pod's uptime in
#: hundredths of a second (``/proc/uptime``, which a pod's clock adjustments never set
#: back, and which its shell reads without a fork).
PAT_STARTED_SUFFIX = ".started"
#: ``pat_clock`` sets ``pat_now`` to the pod's uptime in hundredths of a second ("" when it
#: cannot be read). ``pat_not_superseded FILE``: whether no delivery that started after
#: this one (at ``pat_born``) installed its PAT at FILE meanwhile: a cancelled delivery's
#: shell runs on in the pod, and one stalled before its write would otherwise put its older
#: PAT over the one delivered, and validated, after it. A mark from the future (the
#: agent's, say) is no later delivery's: it keeps nothing out. ``pat_mark_start FILE``
#: marks this one's start beside FILE; a mark that cannot be written (the agent's directory
#: there, say) keeps no PAT out.
PAT_FUNCTIONS = f"""\
pat_clock() {{
  pat_now=
  {{ read -r pat_now _ < /proc/uptime; }} 2>/dev/null
  case $pat_now in
    *[!0-9.]*|*.*.*|.*|*.) pat_now= ;;
    *.*) pat_now=${{pat_now%.*}}${{pat_now#*.}} ;;
    *) pat_now= ;;
  esac
}}
pat_not_superseded() {{
  pat_mark=
  {{ read -r pat_mark < "$1{PAT_STARTED_SUFFIX}"; }} 2>/dev/null
  pat_clock
  case $pat_mark in ''|*[!0-9]*) return 0 ;; esac
  [ -n "$pat_born" ] && [ -n "$pat_now" ] || return 0
  if [ "$pat_mark" -gt "$pat_born" ] 2>/dev/null && [ "$pat_mark" -le "$pat_now" ] 2>/dev/null
  then
    echo "a delivery that started after this one installed its PAT meanwhile: this one's" \\
      "older PAT is not installed over it" >&2
    return 1
  fi
}}
pat_mark_start() {{
  [ -n "$pat_born" ] || return 0
  {{ printf '%s\\n' "$pat_born" > "$1{PAT_STARTED_SUFFIX}"; }} 2>/dev/null || :
}}"""


def _write_pat(read: str) -> str:
    """The PAT's write: ``read`` puts it in ``$t``, and it is installed at ``$1`` as said
    below (:data:`WRITE_PAT_SCRIPT`), under the EXIT trap until it is in place, unless a
    delivery that started after this one installed its own meanwhile (the shell's start is
    taken first, before stdin: see :data:`PAT_FUNCTIONS`). The mark of this one's start is
    written just before its PAT goes in, so that an older shell checking after that stays
    out."""
    return (
        "pat_clock; pat_born=$pat_now; "
        f"umask 077 && pat_tmp=\"$1.$$\" && trap 'exit {EXIT_NOT_DELIVERED}' EXIT "
        f'&& {read} && printf \'%s\' "$t" > "$pat_tmp" && pat_not_superseded "$1" '
        '&& pat_mark_start "$1" && mv -fT "$pat_tmp" "$1" && trap - EXIT'
    )


#: One exec: write the PAT on stdin to the PAT file atomically, readable by the pod's user
#: only, then run onyx-cli, which reads it (the image's wrapper). The path is an argument,
#: so the token is never on a command line (exec's command is in the request URL).
#: An exec whose client went away is not ended, its stdin is: the end of stdin does not
#: mean that all of it came. So the PAT is sent as one line (it never holds a newline), and
#: ``read`` fails unless that newline arrived; the file is then written from the line,
#: through a file of this shell's own (a cancelled delivery's shell may still be writing),
#: removed if it is not installed (:data:`NOT_DELIVERED`).
#: ``mv -T`` replaces the file, never moves into a directory the agent planted there.
#: Until the file is in place, the EXIT trap says :data:`EXIT_NOT_DELIVERED`: a shell that
#: cannot fork (the pod's pids limit reached by the agent's processes) ends at once with 2,
#: running only that trap, and 2 would read as onyx-cli's own code (a SKILL.md counted as
#: delivered, the Onyx server blamed).
WRITE_PAT_SCRIPT = f"{PAT_FUNCTIONS}\n{_write_pat('IFS= read -r t')}"
#: What follows the PAT's write when it fails: its temporary file removed (if the shell can
#: still fork), and the code that says the PAT was not delivered.
NOT_DELIVERED = f'|| {{ rm -f "$pat_tmp"; exit {EXIT_NOT_DELIVERED}; }}'

#: With a claimed pod's SKILL.md too: the PAT is the first ``$3`` bytes of stdin (``dd``
#: with one-byte blocks reads no further), kept once all of them came and written to
#: ``$1``; the rest is the SKILL.md, ``$4`` bytes, written to ``$2`` by the SKILL.md's own
#: commands (given ``$2`` and ``$4`` as their ``$1`` and ``$2``).
_READ_PAT_BYTES = 't=$(dd bs=1 count="$3" 2>/dev/null) && [ "${#t}" -eq "$3" ]'
WRITE_PAT_AND_SKILL_SCRIPT = (
    f"{PAT_FUNCTIONS}\n{claimed_skill.HAS_SIZE_FUNCTION}\n"
    f"{_write_pat(_READ_PAT_BYTES)} {NOT_DELIVERED}\n"
    'set -- "$2" "$4"\n'
    f"{claimed_skill.write_skill(EXIT_SKILL_NOT_DELIVERED)}"
)
#: onyx-cli is validated with the PAT this exec was given, from the shell's own variable,
#: never with what the pod's files say: the agent controls them (it could swap the file
#: back to a PAT it knows is live, or leave onyx-cli to fall back to its config file under
#: $HOME, whose api_key it wrote), and would have a PAT it never used count as validated.
VALIDATE_LINE = (
    'export ONYX_PAT="$t" HOME=/nonexistent XDG_CONFIG_HOME=/nonexistent '
    f"&& exec {' '.join(cli_validation.VALIDATE_ARGV)}"
)
DELIVER_ARGV = (
    "sh",
    "-c",
    f"{WRITE_PAT_SCRIPT} {NOT_DELIVERED}\n{VALIDATE_LINE}",
    "deliver-pat",
    PAT_FILE,
)


def deliver_with_skill_argv(pat_bytes: int, skill_bytes: int) -> tuple[str, ...]:
    """The one exec that writes the PAT (``pat_bytes`` long) and a claimed pod's SKILL.md
    (``skill_bytes`` long), sent one after the other on its stdin, then runs onyx-cli."""
    return (
        "sh",
        "-c",
        f"{WRITE_PAT_AND_SKILL_SCRIPT}\n{VALIDATE_LINE}",
        "deliver-pat-and-skill",
        PAT_FILE,
        claimed_skill.SKILL_FILE,
        str(pat_bytes),
        str(skill_bytes),
    )


def deliver_stdin(token: bytes, skill: bytes | None) -> bytes:
    """What the delivery exec reads: the PAT as one line, or the PAT then the SKILL.md."""
    return token + b"\n" if skill is None else token + skill


async def validate_cli(p: Pass) -> Stop | None:
    """Deliver the PAT and run ``onyx-cli validate-config``, once per pod and PAT."""
    run = p.run
    assert p.pod is not None, "the pod step runs first"
    assert p.issued is not None, "the credentials step runs first"
    uid = p.pod["metadata"].get("uid")
    done = run.status.validated_pod_uid == uid and holds_current_pat(run.status, p.issued)
    if done and (run.status.cli_auth_failures or 0) > 1:
        # An operator before 2026-11-27 marked a fresh PAT refused too as validated and
        # stopped trying; it is tried again, with the deliveries' backoff, as now.
        done = False
    if done and _waited(p):
        # This pod took this PAT, and only an earlier row stopped a pass since (the
        # database down, say): the verdict comes back without an exec (a fleet of them
        # after an outage otherwise).
        reason, meaning = cli_validation.describe_exit(cli_validation.EXIT_OK)
        run.set(ConditionState.true(CLI_VALIDATED, reason, meaning))
    if done and run.condition_is(CLI_VALIDATED, ConditionStatus.TRUE):
        await _retire_superseded(p)  # if a pass was cut off after validating
        return None
    # Done with a False verdict: that verdict was for another token, whose delivery may
    # have written over the validated one (a credentials database swapped and swapped
    # back, each handing out the same PAT id): this one goes in again, with the backoff.
    skill = claimed_skill.pending_skill(p)
    deliveries, target = p.services.deliveries, delivery_target(p)
    wait = deliveries.retry_in(run.key, target)
    if wait > 0:
        _backing_off(p, wait)
        return None
    result = await _deliver_and_validate(p, skill, target)
    if result is None:
        return None
    if skill is not None and result.exit_code in cli_validation.EXIT_MEANINGS:
        # The script reached onyx-cli, so the SKILL.md was written (90 and 91 say it was
        # not; a shell killed before, 137 say, proves nothing).
        run.status.delivered_skill = skill.delivered
    if await _judge(p, uid, result):
        deliveries.failed(run.key, target)
    else:
        deliveries.clear_failures(run.key)
    return None


async def deliver_renewal(p: Pass) -> None:
    """Deliver a new PAT into the sandbox's Ready pod though an earlier row stopped the
    pass (a Secret or ConfigMap write refused, say): a renewed one's predecessor expires at
    the end of its grace period whatever happens, and one that replaced a PAT the pod used
    (revoked by an admin, say, or refused) is what the pod needs most; the pod needs nothing
    else to take it. Only when the pod step did not take the pod (the pass stopped before
    it, or at it: a spec it cannot build a pod from keeps the earlier pod); a pod not Ready, being
    deleted or not the sandbox's controlled pod gets nothing, nor one that has validated no
    PAT yet (its first comes with the pod step)."""
    issued = p.issued
    if p.pod is not None or issued is None:
        return
    status = p.run.status
    if holds_current_pat(status, issued):
        return
    s, meta = p.services, p.sandbox.metadata
    name = status.pod_name or pod_name(p.sandbox)
    found = s.cache.get(POD.name, meta.namespace, name)
    if (
        found is None
        or found["metadata"].get("deletionTimestamp")
        or not controlled_by(found, meta.uid)
        or not pod_state.is_ready(found)
    ):
        return
    replaces = status.validated_pat_id is not None and (
        status.validated_pod_uid == found["metadata"].get("uid")
    )
    if issued.grace_pat_id is None and not replaces:
        return
    p.pod = found
    await validate_cli(p)


def delivery_target(p: Pass) -> str:
    """What the deliveries' backoff is for: this pod and this PAT (a new pod or PAT is
    tried at once; a SKILL.md delivered meanwhile by its own step changes neither)."""
    assert p.pod is not None
    assert p.issued is not None
    return f"{p.pod['metadata'].get('uid', '')}|{p.issued.pat_id}|{p.issued.token_display}"


def holds_current_pat(status: CraftSandboxStatus, issued: IssuedCredential) -> bool:
    """Whether the PAT last validated in the pod is the current one: its id, and its
    display form where the status records it (ids repeat once the credentials database was
    reset or restored, and the new token must still reach the pod)."""
    return status.validated_pat_id == issued.pat_id and status.validated_pat_display in (
        None,
        issued.token_display,
    )


def _backing_off(p: Pass, wait: float) -> None:
    """The last delivery of this PAT into this pod failed, and its backoff has not passed
    (passes come sooner, woken by the pod's events): the verdict it left stays, and the
    delivery is tried again once the backoff has passed. A False verdict always stays;
    an Unknown one that no longer says what happens (an earlier row stopped a pass since,
    or the pass that took the failure could not write it) says when the next try is."""
    held = p.run.condition(CLI_VALIDATED)
    if _waited(p) or (held is not None and held.reason == VALIDATING):
        at = (p.run.moment() + timedelta(seconds=wait)).strftime("%H:%M:%SZ")
        message = f"the last delivery of the PAT failed; it is tried again at {at}"
        p.run.set(ConditionState.unknown(CLI_VALIDATED, RETRY_PENDING, message))
    p.run.revisit(after=wait)


def kept_of(result: ExecResult) -> ExecResult:
    """What a delivery's result keeps until the pass that reads it: its exit code and the
    ends of its stderr (nothing reads its stdout)."""
    stderr = result.stderr
    if len(stderr) > 2 * KEPT_STDERR:
        stderr = stderr[:KEPT_STDERR] + b"\n[...]\n" + stderr[-KEPT_STDERR:]
    return ExecResult(result.exit_code, b"", stderr)


async def _deliver_and_validate(
    p: Pass, skill: claimed_skill.PendingSkill | None, target: str
) -> ExecResult | None:
    """Write the PAT (and a claimed pod's pending SKILL.md) into the pod and run onyx-cli
    with it, in one exec; ``None`` if exec itself failed (the condition says why), or if
    the exec runs on without the pass or waits for room to."""
    assert p.pod is not None
    assert p.issued is not None
    s, meta, key = p.services, p.pod["metadata"], p.run.key
    token = p.issued.token.get_secret_value().encode()
    text = None if skill is None else skill.text
    argv = DELIVER_ARGV if text is None else deliver_with_skill_argv(len(token), len(text))
    # It may run a while from now (waiting for room): only into this very pod.
    exec_ = exec_into_pod_of(p)

    async def deliver() -> ExecResult:
        started = time.monotonic()
        result = await exec_.run(
            meta.get("namespace", ""),
            meta["name"],
            SANDBOX_CONTAINER,
            list(argv),
            stdin=deliver_stdin(token, text),
            timeout=CLI_TIMEOUT,
            max_output_bytes=CLI_MAX_OUTPUT,
        )
        if result.exit_code == cli_validation.EXIT_OK:  # (as every phase: its successes)
            s.metrics.observe_phase(ProvisioningPhase.CLI_VALIDATION, time.monotonic() - started)
        return kept_of(result)

    # One delivery per pod, PAT and SKILL.md; a slow one runs on without the pass.
    skill_hash = "" if skill is None else skill.delivered.content_hash
    try:
        result = await s.deliveries.result(
            key, f"{target}|{skill_hash}", deliver, owner=meta.get("uid", "")
        )
    except Exception as exc:
        # Backed off whatever it was: one that cannot pass (an onyx-cli that prints more
        # than is read, say) is not run again on every event of its pod.
        s.deliveries.failed(key, target)
        if not isinstance(exc, ExecError):
            raise  # the pass fails (and says why in the log)
        _exec_failed(p, exc)
        return None
    if result is None:
        _validating(p, waiting=s.deliveries.waiting(key))
    return result


def _validating(p: Pass, *, waiting: bool) -> None:
    """The delivery runs on without the pass (onyx-cli slow to answer, or a pod that holds
    it), or waits for room to (``waiting``: as many run on as may): either way its end,
    or room, wakes the sandbox. A verdict already given stays meanwhile (a renewal keeps a
    Ready sandbox Ready), while the PAT it was given for lives: not once that one expired
    or was revoked (its grace period over before the delivery found room, say)."""
    dead = _validated_pat_gone(p)
    if dead is not None or not p.run.condition_is(
        CLI_VALIDATED, ConditionStatus.TRUE, ConditionStatus.FALSE
    ):
        message = "onyx-cli is still validating the PAT in the pod"
        if waiting:
            message = "waiting for room among the PAT deliveries that run on (onyx-cli slow)"
        p.run.set(ConditionState.unknown(CLI_VALIDATED, VALIDATING, dead or message))
    # Woken when it ends (or when there is room); these in case that is lost (and within a
    # minute of a grace period's end, which ends the verdict given for its PAT).
    p.run.revisit(after=WAITING_RETRY if waiting else CLI_TIMEOUT + 5)


def _validated_pat_gone(p: Pass) -> str | None:
    """What to say if the PAT the pod was last validated with is neither the current one
    nor one still in its grace period (the pod's onyx-cli is refused), else ``None``."""
    assert p.issued is not None
    old = p.run.status.validated_pat_id
    if old is None or holds_current_pat(p.run.status, p.issued):
        return None
    if old == p.issued.pat_id:  # the same id, another token
        return (
            f"the pod's PAT {old} is not the token the credentials database holds now (it "
            "was reset or restored since): onyx-cli is refused until the current PAT, "
            "delivered and validated now, replaces it"
        )
    expires = p.issued.grace_expires_at
    if old == p.issued.grace_pat_id and expires is not None and p.run.now < expires:
        return None
    return (
        f"the pod's PAT {old} is no longer live (expired or revoked): onyx-cli is refused "
        f"until PAT {p.issued.pat_id}, delivered and validated now, replaces it"
    )


async def _retire_superseded(p: Pass) -> None:
    """The pod uses the current PAT now: revoke the one it superseded, still in its grace
    period, at once. A failure is harmless (the old PAT expires with its grace period) and
    is tried again on the next pass."""
    assert p.issued is not None
    if p.issued.grace_pat_id is None:
        return
    meta = p.sandbox.metadata
    try:
        retired = await p.services.credentials.retire(
            meta.namespace or "", meta.name, meta.uid or "", p.issued.pat_id
        )
    except CredentialsError as exc:
        logger.warning("%s/%s: cannot revoke the superseded PAT yet: %s", *p.run.key, exc)
        return
    if retired is not None:
        p.event("PATRetired", f"revoked PAT {retired}: the pod uses PAT {p.issued.pat_id} now")


def _waited(p: Pass) -> bool:
    """Whether CLIValidated is Unknown only because a pass stopped before this row."""
    held = p.run.condition(CLI_VALIDATED)
    return (
        held is not None
        and held.status == ConditionStatus.UNKNOWN
        and held.message == WAITING_MESSAGE
    )


def _exec_failed(p: Pass, exc: ExecError) -> None:
    p.run.set(ConditionState.unknown(CLI_VALIDATED, "ExecFailed", str(exc)))
    if exc.retryable:
        p.run.revisit(backoff="ExecFailed")


async def _judge(p: Pass, uid: str | None, result: ExecResult) -> bool:
    """Record what onyx-cli's exit code says; a refused PAT gets one fresh one. Whether the
    delivery failed in a way it is tried again for, after the deliveries' backoff (not
    when the PAT was validated, nor at a first refusal: the new PAT goes at once; a fresh
    PAT refused too is tried again with backoff, and no other is minted)."""
    run = p.run
    assert p.issued is not None
    if result.exit_code == EXIT_NOT_DELIVERED:
        detail = f"could not write the PAT to {PAT_FILE}"
        excerpt = _excerpt(p, result)
        p.fail(CLI_VALIDATED, "DeliveryFailed", f"{detail}: {excerpt}" if excerpt else detail)
        return True
    if result.exit_code == EXIT_SKILL_NOT_DELIVERED:
        detail = f"could not write {claimed_skill.SKILL_FILE} into the pod"
        excerpt = _excerpt(p, result)
        claimed_skill.skill_failed(p, f"{detail}: {excerpt}" if excerpt else detail)
        run.set(ConditionState.unknown(CLI_VALIDATED, claimed_skill.DELIVERY_FAILED, detail))
        run.revisit(backoff=claimed_skill.DELIVERY_FAILED)
        return True
    reason, meaning = cli_validation.describe_exit(result.exit_code)
    if result.exit_code == cli_validation.EXIT_OK:
        run.status.validated_pod_uid = uid
        run.status.validated_pat_id = p.issued.pat_id
        run.status.validated_pat_display = p.issued.token_display
        run.status.cli_auth_failures = None
        run.set(ConditionState.true(CLI_VALIDATED, reason, meaning))
        p.event("CLIValidated", meaning)
        await _retire_superseded(p)
        return False
    detail = f"{meaning} (exit {result.exit_code})"
    excerpt = _excerpt(p, result)
    if excerpt:
        detail += f": {excerpt}"
    if cli_validation.refused_not_for_the_pat(result.exit_code, result.stderr):
        # Not Onyx's verdict on the PAT: minting another would revoke a good one for nothing.
        reason = cli_validation.SERVER_REFUSED
        detail = (
            "something before Onyx's check of the PAT (a firewall, WAF, load balancer or "
            "reverse proxy) refused onyx-cli, so no new PAT is minted; tried again with a "
            f"backoff: {detail}"
        )
    elif result.exit_code == cli_validation.EXIT_AUTH_FAILURE:
        return await _auth_failed(p, detail)
    run.set(ConditionState.false(CLI_VALIDATED, reason, detail))
    p.event(reason, detail, warning=True)
    run.revisit(backoff=reason)
    return True


def _excerpt(p: Pass, result: ExecResult) -> str:
    """The end of the delivery's stderr for a message; withheld if it holds a piece of the
    PAT it carried, however cut up (the agent controls the pod, and onyx-cli, or what
    stands in for it, may print it)."""
    assert p.issued is not None
    return result.stderr_excerpt(300, secrets=(p.issued.token.get_secret_value(),))


async def _auth_failed(p: Pass, detail: str) -> bool:
    """The server refused the PAT: mint a new one once and deliver it at once. If that is
    refused too, no more are minted (a server that refuses every PAT would otherwise burn
    one per try), but the same one is tried again with the deliveries' backoff (up to 5
    minutes): an outage of the server's authentication ends by itself. Returns whether
    the delivery counts as failed (backs off)."""
    run = p.run
    assert p.issued is not None
    failures = (run.status.cli_auth_failures or 0) + 1
    run.status.cli_auth_failures = failures
    if failures > 1:
        message = f"{detail}; a freshly minted PAT was refused too, so no more are minted "
        message += "until the spec changes: the same one is tried again with a backoff"
        run.set(ConditionState.false(CLI_VALIDATED, "AuthFailed", message))
        if failures == 2:
            p.event("AuthFailed", message, warning=True)
        run.revisit(backoff="AuthFailed")
        return True
    message = f"{detail}; minting a new PAT and delivering it into the pod"
    run.set(ConditionState.false(CLI_VALIDATED, "AuthFailed", message))
    p.event("AuthFailed", message, warning=True)
    try:
        issued = await p.services.credentials.ensure(p.sandbox, rejected_pat_id=p.issued.pat_id)
    except CredentialsError as exc:
        # No fresh PAT exists: the next refusal is still the first (a second would stop
        # the minting, though no fresh PAT was refused).
        run.status.cli_auth_failures = None
        credentials.failed(p, credentials.failure_reason(exc), str(exc))
        return True  # the refused PAT is tried again with the backoff, not every pass
    if issued.pat_id == p.issued.pat_id:
        run.status.cli_auth_failures = None  # no new PAT came of it, likewise
    if issued.minted:
        credentials.record(p, issued)  # said and counted as any mint
    run.revisit(after=0)  # the next pass delivers the new PAT into the same pod
    return False


STEP = Step(CLI_VALIDATED, validate_cli, keeps_failure=True)
