"""Operator start and stop: the reconcile workers run inside kopf's context.

A stop drains first: on SIGTERM (or the caller's stop flag) no new pass starts and those in
progress end (:data:`STOP_GRACE`), and only then is kopf told to stop, which removes the
replica's record from the peering object. A standby takes over from finished passes, and
the replica's own peering monitor, seeing its record gone, has no pass left to cut off.
kopf alone would do it the other way round: its peering keep-alive ends (record removed)
with its other root tasks, before its clean-up handlers run.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import threading
from typing import Any

import kopf

from craft_operator.context import OperatorContext
from craft_operator.handlers.streams import watch_streams


async def start_workers(memo: OperatorContext, logger: kopf.Logger, **_: Any) -> None:
    """Start the reconcile workers (they post events, so they need kopf's context).

    A standalone operator's workers wait until the first listing is in the cache.
    """
    memo.events.start()
    memo.queue.start()
    memo.pool_queue.start()
    if memo.gate.priming:
        memo.background.add(asyncio.create_task(memo.gate.prime(), name="prime-cache"))
    if memo.sweeper is not None:
        memo.background.add(asyncio.create_task(memo.sweeper.run(), name="orphan-sweep"))
    for stream in watch_streams(memo):
        memo.background.add(asyncio.create_task(stream.run(), name=f"watch {stream.name}"))
    logger.info("started %d reconcile workers", memo.settings.workers)


#: Seconds a pass in progress at shutdown may take to end: a pass takes milliseconds, but
#: one cut off between two writes that belong together (a sync Job and its Secret) should
#: rather end; Kubernetes waits 30 s after SIGTERM.
STOP_GRACE = 5.0


#: The signals that stop the operator (they replace kopf's own handlers for them).
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)

log = logging.getLogger(__name__)


async def drain_workers(memo: OperatorContext) -> None:
    """Start no new pass, and let the passes and library syncs in progress end (at most
    :data:`STOP_GRACE` seconds, then they are cancelled)."""
    await asyncio.gather(
        memo.queue.stop(grace=STOP_GRACE),
        memo.pool_queue.stop(grace=STOP_GRACE),
        memo.services.library_pool.drain(STOP_GRACE),
        memo.services.deliveries.drain(STOP_GRACE),
    )


async def stop_in_order(
    memo: OperatorContext, requested: asyncio.Event, kopf_stop: asyncio.Event
) -> None:
    """Once a stop is ``requested``: drain the work queues, then set ``kopf_stop`` (kopf's
    stop flag; see the module docstring)."""
    await requested.wait()
    await drain_workers(memo)
    kopf_stop.set()


def catch_stop_signals(requested: asyncio.Event, kopf_stop: asyncio.Event) -> None:
    """Make SIGTERM and SIGINT set ``requested``, and a second one ``kopf_stop`` at once
    (no drain), in the main thread only, where signals are delivered; elsewhere the
    caller's stop flag is the only way to stop."""
    if threading.current_thread() is not threading.main_thread():
        return
    loop = asyncio.get_running_loop()
    for signum in STOP_SIGNALS:
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(signum, _stop_requested, signum, requested, kopf_stop)


#: The deepest await chain written per task.
MAX_DUMPED_FRAMES = 40
#: The signal that writes every task's stack to the log (for a stuck worker:
#: ``kubectl exec POD -- sh -c 'kill -USR1 1'``); the operator goes on.
DUMP_SIGNAL = signal.SIGUSR1


def dump_tasks_on_signal() -> None:
    """Make :data:`DUMP_SIGNAL` log the stack of every asyncio task (where each waits: the
    code's file and line, never a value), in the main thread only."""
    if threading.current_thread() is not threading.main_thread():
        return
    with contextlib.suppress(NotImplementedError):
        asyncio.get_running_loop().add_signal_handler(DUMP_SIGNAL, dump_tasks)


def dump_tasks() -> None:
    """Log the stack of every asyncio task of the running loop, one record per task."""
    tasks = sorted(asyncio.all_tasks(), key=lambda task: task.get_name())
    log.warning("%s: the stacks of %d tasks follow", DUMP_SIGNAL.name, len(tasks))
    for task in tasks:
        where = "\n".join(awaiting(task)) or "  (done)"
        log.warning("task %s:\n%s", task.get_name(), where)


def awaiting(task: asyncio.Task[Any]) -> list[str]:
    """Where ``task`` waits: each coroutine of its await chain, outermost first, as a
    traceback writes a frame (a task's own stack has its outermost coroutine only)."""
    lines: list[str] = []
    awaited: Any = task.get_coro()
    while awaited is not None and len(lines) < MAX_DUMPED_FRAMES:
        frame = getattr(awaited, "cr_frame", None) or getattr(awaited, "gi_frame", None)
        if frame is None:
            break
        code = frame.f_code
        lines.append(f'  File "{code.co_filename}", line {frame.f_lineno}, in {code.co_name}')
        awaited = getattr(awaited, "cr_await", None) or getattr(awaited, "gi_yieldfrom", None)
    return lines


def _stop_requested(
    signum: signal.Signals, requested: asyncio.Event, kopf_stop: asyncio.Event
) -> None:
    if requested.is_set():
        log.info("%s received again: stopping without waiting for the drain", signum.name)
        kopf_stop.set()
        return
    log.info("%s received: draining the reconcile workers, then stopping", signum.name)
    requested.set()


async def stop_workers(memo: OperatorContext, **_: Any) -> None:
    """Stop the workers and close the API client and the S3 connections. After a stop was
    asked for, the drain gave the passes their grace (or a second signal cut it short):
    what is left is cancelled at once."""
    for task in memo.background:
        task.cancel()
    await asyncio.gather(*memo.background, return_exceptions=True)
    memo.background.clear()
    grace = 0.0 if memo.stop_requested.is_set() else STOP_GRACE
    await memo.queue.stop(grace=grace)
    await memo.pool_queue.stop(grace=grace)
    await memo.events.stop()
    await memo.services.library.close()
    await memo.kube.close()


def register(registry: kopf.OperatorRegistry) -> None:
    """Register the start-up and clean-up handlers."""
    kopf.on.startup(registry=registry, id="start-workers")(start_workers)
    kopf.on.cleanup(registry=registry, id="stop-workers")(stop_workers)
