"""CredentialsReady: the sandbox holds a live PAT, minted or reused, renewed before it expires."""

from __future__ import annotations

import time

from craft_operator.api.models import ANNOTATION_PAT_REVOKED, ConditionStatus, CredentialsStatus
from craft_operator.credentials.errors import (
    CredentialsError,
    DatabaseUnavailableError,
    KeyNotInRingError,
    KeyRingError,
    SchemaMissingError,
    TenantGoneError,
    UserInactiveError,
    UserNotFoundError,
)
from craft_operator.credentials.model import NO_CREDENTIAL, renewal_due_at
from craft_operator.metrics import ProvisioningPhase
from craft_operator.reconciler.ports import IssuedCredential
from craft_operator.reconciler.step import Pass, Step, Stop
from craft_operator.status import CREDENTIALS_READY, ConditionState, kube_time

WAITING = "WaitingForCredentials"

_REASONS: tuple[tuple[type[CredentialsError], str], ...] = (
    (UserNotFoundError, "UserNotFound"),
    (UserInactiveError, "UserInactive"),
    (DatabaseUnavailableError, "DatabaseUnavailable"),
    (KeyNotInRingError, "KeyNotInRing"),  # before KeyRingError, its base: first match wins
    (KeyRingError, "KeyRingError"),
    (TenantGoneError, "TenantGone"),  # before SchemaMissingError, its base
    (SchemaMissingError, "DatabaseSchemaMissing"),
)


def failure_reason(exc: CredentialsError) -> str:
    """The condition reason for a credentials failure, stable enough to alert on."""
    return next((reason for kind, reason in _REASONS if isinstance(exc, kind)), "CredentialsError")


async def ensure_pat(p: Pass) -> Stop | None:
    """Find or mint the sandbox's PAT; the pass waits for it when there is none."""
    s = p.services
    started = time.monotonic()
    try:
        issued = await s.credentials.ensure(p.sandbox)
    except CredentialsError as exc:
        return failed(p, failure_reason(exc), str(exc))
    if issued.minted:
        s.metrics.observe_phase(ProvisioningPhase.CREDENTIALS, time.monotonic() - started)
    record(p, issued)
    return None


def record(p: Pass, issued: IssuedCredential) -> None:
    """The pass holds ``issued`` from here: a mint counted and said in an event, the
    condition, ``status.credentials``, and the revisit before its renewal and by the time
    it is read from the database again."""
    s, run = p.services, p.run
    if issued.minted:
        reason = _mint_reason(p, issued)
        s.metrics.pat_minted(reason)
        p.event(
            "PATMinted",
            f"minted PAT {issued.token_display} (id {issued.pat_id})"
            + (f": {reason}" if reason else ""),
        )
    else:
        s.metrics.pat_reused()
    if not (
        CREDENTIALS_READY in run.touched
        and run.condition_is(CREDENTIALS_READY, ConditionStatus.FALSE)
    ):  # a failure this pass said (the Secret refused, say) stays said
        run.set(ConditionState.true(CREDENTIALS_READY, "PATValid", _message(p, issued)))
    run.status.credentials = CredentialsStatus(
        token_display=issued.token_display,
        pat_id=issued.pat_id,
        minted_at=kube_time(issued.created_at),
        expires_at=kube_time(issued.expires_at) if issued.expires_at else None,
    )
    if issued.expires_at is not None:
        renew_at = renewal_due_at(
            issued.expires_at,
            p.sandbox.spec.credentials.lifetime,
            s.settings.credential_renewal_fraction,
        )
        run.revisit(after=max(60.0, (renew_at - run.now).total_seconds() + 1))
    if issued.recheck_at is not None:
        # Back by the time the database is read again, whatever brought this pass (a pod's
        # event, the idle check) and however a failing step backs off: a PAT revoked out of
        # band is noticed within the interval.
        run.due_within((issued.recheck_at - run.now).total_seconds())
    p.issued = issued


def _mint_reason(p: Pass, issued: IssuedCredential) -> str | None:
    """Why ``issued`` was minted. ``credentials revoke`` deletes the stored row, so the PAT
    minted after it finds no credential stored: when the annotation names the PAT the
    status held, that mint was asked for by the revocation; when it does not (the command
    could not reach the cluster), the mint still replaces the PAT the sandbox held. Only
    where none was held is it a first mint."""
    revoked = p.sandbox.metadata.annotations.get(ANNOTATION_PAT_REVOKED)
    held = p.run.old_status.credentials
    if issued.reason != NO_CREDENTIAL or held is None:
        return issued.reason
    if revoked == str(held.pat_id):
        return (
            f"a new PAT was requested after PAT {held.pat_id} was revoked "
            f"({ANNOTATION_PAT_REVOKED})"
        )
    return (
        f"PAT {held.pat_id}, which the sandbox held, is no longer stored: revoked by "
        "craft-operator credentials revoke, or its stored credential deleted"
    )


def _message(p: Pass, issued: IssuedCredential) -> str:
    """The condition's message: the PAT's validity, and why it replaced the last one."""
    validity = (
        f"PAT {issued.token_display} is valid until {issued.expires_at:%Y-%m-%dT%H:%M:%SZ}"
        if issued.expires_at
        else f"PAT {issued.token_display} does not expire"
    )
    if issued.minted and issued.superseded_pat_id is not None and issued.reason:
        return f"{validity}; it replaced PAT {issued.superseded_pat_id}: {issued.reason}"
    # Why this PAT replaced the last one stays said while the PAT is the same.
    held = p.run.condition(CREDENTIALS_READY)
    current = held.message if held is not None else ""
    return current if current.startswith(f"{validity}; it replaced PAT ") else validity


def failed(p: Pass, reason: str, message: str) -> Stop:
    """No PAT: CredentialsReady False, counted, said in an event, retried with backoff."""
    p.services.metrics.pat_failed(reason)
    p.fail(CREDENTIALS_READY, reason, message)
    return Stop(WAITING)


STEP = Step(CREDENTIALS_READY, ensure_pat)
