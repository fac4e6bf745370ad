"""Run the real kopf operator loop in-process against an emulated API server."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import kopf

from craft_operator.config import Settings
from craft_operator.context import OperatorContext
from craft_operator.kube.exec import ExecTransport
from craft_operator.peering.options import PeeringOptions
from craft_operator.runtime import build_context, run_operator


@dataclass
class RunningOperator:
    """One operator process, as far as a test is concerned: stop it, or kill it."""

    task: asyncio.Task[None]
    context: OperatorContext
    stop_flag: asyncio.Event
    foreign: set[asyncio.Task[Any]] = field(default_factory=set)

    async def stop(self, timeout: float = 30.0) -> None:  # noqa: ASYNC109
        """Graceful shutdown, as on SIGTERM; the operator must exit cleanly."""
        # kopf cancels, on shutdown, every task it did not see start; this caller's task is
        # not the operator's, so say so before asking it to stop.
        current = asyncio.current_task()
        if current is not None:
            self.foreign.add(current)
        self.stop_flag.set()
        try:
            await asyncio.wait_for(self.task, timeout=timeout)
        except TimeoutError:
            raise TimeoutError("the operator did not stop within 30 seconds") from None

    async def kill(self) -> None:
        """Abrupt end, as on SIGKILL: no clean-up, in-flight work is abandoned."""
        current = asyncio.current_task()
        if current is not None:
            self.foreign.add(current)
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.task


async def start_operator(
    server_url: str,
    settings: Settings,
    *,
    exec_transport: ExecTransport | None = None,
    startup_timeout: float = 20.0,
    peering: PeeringOptions | None = None,
    namespaces: tuple[str, ...] = (),
) -> RunningOperator:
    """Start the operator against ``server_url`` and wait until it is ready.

    Standalone unless ``peering`` names a peering object (then it starts as a standby);
    cluster-wide unless given ``namespaces``.
    """
    context = build_context(settings, exec_transport=exec_transport)
    stop_flag = asyncio.Event()
    ready_flag = asyncio.Event()
    foreign: set[asyncio.Task[Any]] = set()

    def login(**_: Any) -> kopf.ConnectionInfo:
        return kopf.ConnectionInfo(server=server_url, insecure=True)

    task = asyncio.create_task(
        run_operator(
            settings,
            namespaces=namespaces,
            standalone=peering is None,
            peering=peering,
            login=login,
            stop_flag=stop_flag,
            ready_flag=ready_flag,
            foreign_tasks=foreign,
            context=context,
        ),
        name="craft-operator",
    )
    ready = asyncio.create_task(ready_flag.wait())
    await asyncio.wait({task, ready}, timeout=startup_timeout, return_when=asyncio.FIRST_COMPLETED)
    if task.done():
        ready.cancel()
        task.result()  # re-raise why the operator died
        raise RuntimeError("the operator exited during start-up")
    if not ready.done():
        ready.cancel()
        task.cancel()
        raise TimeoutError("the operator did not become ready")
    return RunningOperator(task, context, stop_flag, foreign)


@contextlib.asynccontextmanager
async def running_operator(
    server_url: str,
    settings: Settings,
    *,
    exec_transport: ExecTransport | None = None,
    peering: PeeringOptions | None = None,
    namespaces: tuple[str, ...] = (),
) -> AsyncIterator[OperatorContext]:
    """The operator for the duration of a ``with`` block; stopped cleanly (or fail loudly)."""
    running = await start_operator(
        server_url, settings, exec_transport=exec_transport, peering=peering, namespaces=namespaces
    )
    try:
        yield running.context
    finally:
        if not running.task.done():
            await running.stop()


async def eventually(
    check: Callable[[], Any], *, within: float = 10.0, interval: float = 0.02, what: str = ""
) -> Any:
    """Poll ``check`` until it returns something truthy (returned); fail after ``within`` s."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    last_error: Exception | None = None
    while True:
        try:
            result = check()
            if result:
                return result
        except (KeyError, AssertionError) as exc:
            last_error = exc
        if loop.time() > deadline:
            detail = f": {last_error!r}" if last_error else ""
            raise AssertionError(f"timed out waiting for {what or check!r}{detail}")
        await asyncio.sleep(interval)
