"""Reconcile one CraftSandbox: the finalizer, the policy, the table of steps, the status.

Level-triggered: every pass reads the sandbox and its children from the watch cache,
computes what should exist, changes only what differs, and writes the status only if it
changed. A pass may run twice, be cut off halfway or see a changed world; the next pass
converges from wherever the last one stopped. The steps and their order are
:mod:`craft_operator.reconciler.table`.
"""

from __future__ import annotations

import asyncio
import copy
import time
from collections.abc import Mapping
from typing import Any

from craft_operator.api.models import CraftSandboxStatus, Phase
from craft_operator.api.parse import InvalidSandboxError, parse_sandbox
from craft_operator.kube import kinds
from craft_operator.kube.client import ApiError
from craft_operator.kube.event_batch import EventBatch
from craft_operator.reconciler import api_away, finalizer, suspension
from craft_operator.reconciler import policy_step as policy
from craft_operator.reconciler.deps import Services
from craft_operator.reconciler.queue import RetryableError
from craft_operator.reconciler.run import Revisit, Run
from craft_operator.reconciler.status_writer import write_status
from craft_operator.reconciler.step import Held, Memory, Pass
from craft_operator.reconciler.steps import workspace
from craft_operator.reconciler.table import CONDITIONS, run_steps
from craft_operator.status import POD_READY, ConditionState

FINALIZER = finalizer.FINALIZER
SANDBOX = kinds.SANDBOX.name


class RetryLaterError(RetryableError):
    """A pass failed in a way that may pass; the status says which. The work queue retries
    it with backoff (the queue's signal; steps ask with ``run.revisit(backoff=...)``)."""


def next_visit(key: tuple[str, str], verdict: Revisit, resync: float) -> float:
    """Seconds until the next pass after one that ended with ``verdict`` (at most
    ``resync``, and ``verdict.due``); :class:`RetryLaterError` for the queue's backoff, but
    no later than ``verdict.due``, and at once if the sandbox was edited during the pass
    (the edit may be the fix: it is looked at now, and the failure still counts towards
    the backoff)."""
    if verdict.backoff:
        retry_after = 0.0 if verdict.changed else None
        raise RetryLaterError(
            f"{key[0]}/{key[1]}: {verdict.backoff}", retry_after=retry_after, retry_by=verdict.due
        )
    wanted = [resync, *(seconds for seconds in (verdict.after, verdict.due) if seconds is not None)]
    return min(wanted)


class SandboxReconciler:
    """Reconciles CraftSandboxes by (namespace, name); see the module docstring."""

    def __init__(self, services: Services) -> None:
        self.services = services
        self._memory = Memory()

    def forget(self, key: tuple[str, str]) -> None:
        """Drop what is remembered about a sandbox that is gone (and cancel its sync)."""
        self._memory.forget(key)
        self.services.library_pool.forget(key)
        self.services.deliveries.forget(key)

    async def forget_all(self) -> None:
        """The replica stands by: what it remembers of every sandbox goes stale (the other
        replica acts meanwhile), so it starts afresh from the cluster's state when active."""
        self._memory = Memory()

    async def reconcile(self, key: tuple[str, str]) -> float | None:
        """One pass for the sandbox ``key``; returns when to revisit (seconds) or ``None``.

        Raises :class:`RetryLaterError` when the pass asks to be retried with backoff, and
        :class:`~craft_operator.reconciler.api_away.ApiServerAwayError` when the API server
        was away, :class:`~craft_operator.reconciler.api_away.ApiRefusedError` when it
        refused a request.
        """
        try:
            verdict = await self._pass(key)
        except ApiError as exc:
            retried = api_away.expected(f"{key[0]}/{key[1]}", exc)
            if retried is None:
                raise
            raise retried from exc
        if verdict is None:
            return None
        return next_visit(key, verdict, self.services.settings.resync_interval)

    async def _pass(self, key: tuple[str, str]) -> Revisit | None:
        found = self.services.cache.get(SANDBOX, *key)
        if found is None:
            return None
        # The pass's Normal events become one Event, posted when the pass ends however it
        # ends (Warnings go at once); nothing of the pass is held after it.
        batch = EventBatch(self.services.events)
        services = copy.copy(self.services)  # the pass's own view: events go to its batch
        services.events = batch
        try:
            return await self._steps(services, batch, key)
        finally:
            batch.close()
            self._forget_if_gone(key, found["metadata"].get("uid"))

    def _forget_if_gone(self, key: tuple[str, str], uid: str | None) -> None:
        """The sandbox went while the pass ran (its finalizer removed by hand): what the
        pass remembered after its deletion was forgotten would stay for good."""
        now = self.services.cache.get(SANDBOX, *key)
        if now is None or now["metadata"].get("uid") != uid:
            self.forget(key)
            self.services.credentials.forget(uid or "")

    async def _steps(self, s: Services, batch: EventBatch, key: tuple[str, str]) -> Revisit | None:
        body = s.cache.get(SANDBOX, *key)
        if body is None:
            return None
        if body.get("metadata", {}).get("deletionTimestamp"):
            return await finalizer.finalize(s, body, CONDITIONS)
        seen_before = FINALIZER in (body.get("metadata", {}).get("finalizers") or [])
        ensured = await finalizer.ensure(s, body)
        if not isinstance(ensured, dict):
            return ensured
        held, held_for = self._held(key, ensured, batch)
        acted_on = self._memory.acted_on.get(key)
        run = Run(
            ensured,
            s.clock(),
            CONDITIONS,
            held=held,
            held_for=held_for,
            acted_on=acted_on,
            seen_before=seen_before,
        )
        try:
            sandbox = parse_sandbox(ensured)
        except InvalidSandboxError as exc:
            _invalid(s, run, f"the CraftSandbox is invalid: {exc}")
            await write_status(s, run)
            return None
        if run.spec_changed:
            run.status.pod_failures = None
            s.deliveries.clear_failures(key)  # any spec change retries the PAT's delivery
            if run.status.cli_auth_failures:
                # A fresh PAT refused too stops the minting until the spec changes; operators
                # before 2026-11-27 also marked it validated in its pod: validate again.
                run.status.cli_auth_failures = None
                run.status.validated_pat_id = None
                run.status.validated_pat_display = None
        p = Pass(s, sandbox, run, self._memory)
        suspension.note(p)  # before anything that may stop the pass
        judged = False
        try:
            # The platform's policy comes first: a sandbox it does not allow gets no PAT.
            if not await policy.enforce(s, sandbox, run):
                judged = True
                await run_steps(p)
            else:
                # Withdrawn or not judged yet: no step runs, but retain must still decide
                # who owns the workspace before any (foreground) deletion comes.
                await workspace.settle_owner(p)
                if run.status.workspace is not None and sandbox.spec.workspace is not None:
                    run.status.workspace.retain = sandbox.spec.workspace.retain
        except asyncio.CancelledError:
            # The replica stops or stands by: no status of a pass cut short (the next pass,
            # here or on the other replica, writes its own), no wait on the API server.
            raise
        except Exception as exc:
            run.interrupted = True
            if judged and run.generation is not None:
                # Its retries must not take the spec for new again (a policy missing since
                # would deny it; the failure counts would start over on every retry).
                self._memory.acted_on[key] = run.generation
            s.events.post(run.body, type="Warning", reason="ReconcileError", message=_error(exc))
            await self._write(s, run)  # what a pass that failed found, then its error
            raise
        self._memory.acted_on.pop(key, None)
        if not self._hold(run, batch):
            await self._write(s, run)
        return run.verdict

    async def _write(self, s: Services, run: Run) -> None:
        """Write the pass's status. One that failed is not held by the next pass: a held
        pass writes nothing and would pass for a success between two failures, so that the
        backoff never grew while every pass redid what the status never recorded (a
        validation, a library sync). A pass that wrote nothing else says so in an event, as
        the status it would say it in is what cannot be written."""
        try:
            await write_status(s, run)
        except Exception as exc:
            self._memory.unwritten[run.key] = True
            if not run.interrupted:  # (a failed pass said its own error)
                message = (
                    f"the status could not be written ({_what(exc)}); the pass is retried "
                    "with backoff (the operator's log has the details)"
                )
                s.events.post(run.body, type="Warning", reason="StatusWriteFailed", message=message)
            raise
        self._memory.unwritten.pop(run.key, None)

    def _held(
        self, key: tuple[str, str], body: Mapping[str, Any], batch: EventBatch
    ) -> tuple[CraftSandboxStatus | None, float | None]:
        """The status the last pass held, if the sandbox is still the version it saw, and
        for how many seconds more it may be held; its events go into this pass's batch."""
        held = self._memory.held.pop(key, None)
        if held is None:
            return None, None
        batch.carry(body, held.notes)
        if held.version != body.get("metadata", {}).get("resourceVersion"):
            return None, None
        return held.status, held.until - time.monotonic()

    def _hold(self, run: Run, batch: EventBatch) -> bool:
        """Keep the pass's status and Normal events for the next pass instead of writing
        them, if a step asked (the next pass comes within ``run.hold_for`` seconds and
        writes and says both at once)."""
        if run.hold_for is None or run.key in self._memory.unwritten:
            return False
        run.finish()  # as if written: Ready, the phase and the generation it acted on
        self._memory.held[run.key] = Held(
            version=run.body.get("metadata", {}).get("resourceVersion", ""),
            status=run.status.model_copy(deep=True),
            until=time.monotonic() + run.hold_for,
            notes=batch.take(),
        )
        run.revisit(after=run.hold_for)
        return True


def _error(exc: Exception) -> str:
    """An event's words for an error no step handles: its kind and, from the API server, its
    status and reason (never its message: an API server's or a driver's words may quote what
    the request carried)."""
    return (
        f"the reconcile stopped at an unexpected error ({_what(exc)}); it is retried with backoff "
        "and the status keeps the generation last acted on (the operator's log has the "
        "details)"
    )


def _what(exc: Exception) -> str:
    """An error's kind and, from the API server, its status and reason."""
    return f"{exc.status} {exc.reason}" if isinstance(exc, ApiError) else type(exc).__name__


def _invalid(s: Services, run: Run, message: str) -> None:
    """A spec the API server let through but the operator cannot read: Failed, said in an
    event when it starts (not again on every resync); the next change to the spec is read
    again."""
    said = run.failed_already("InvalidSpec", message)
    run.phase = Phase.FAILED
    run.set(ConditionState.false(POD_READY, "InvalidSpec", message))
    if not said:
        s.events.post(run.body, type="Warning", reason="InvalidSpec", message=message)
