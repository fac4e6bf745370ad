"""The synchronous client, for Celery workers and other blocking code.

:class:`SandboxClient` runs :class:`~craft_operator.client.aio.AsyncSandboxClient` on an
event loop in a thread of its own, so it holds no logic of its own, may be shared by
threads, and works from code that is itself inside an event loop. A progress callback that
is a plain function runs in a worker thread (one report at a time, in order), so a slow one
(a blocking write to a slow browser) holds up only its own wait, and it may call the
client. A coroutine-function callback runs on the client's thread: it must not block, and
must await ``client.aio``'s methods, not the client's (that would wait on the thread that
runs the call: it raises :class:`SandboxClientError` instead). Make one per process (after a
fork, not before: a forked child has no copy of the client's thread, so a client it
inherited raises :class:`SandboxClientError` instead of waiting for ever) and close it when
done: calls still running then end with :class:`SandboxClientError`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import inspect
import os
import threading
from collections.abc import Coroutine, Iterable, Mapping
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

from craft_operator.api.models import CraftSandbox, CraftSandboxStatus, Source, Workspace
from craft_operator.client.aio import FIELD_MANAGER, AsyncSandboxClient, ProgressCallback
from craft_operator.client.connection import Connection
from craft_operator.client.errors import SandboxClientError
from craft_operator.client.readiness import Progress
from craft_operator.client.transport import RetryPolicy

T = TypeVar("T")
#: Seconds close() lets the calls it cancelled unwind before it closes the session.
CLOSE_GRACE = 5.0


class SandboxClient:
    """The blocking twin of :class:`AsyncSandboxClient`: the same methods, the same errors."""

    def __init__(
        self,
        connection: Connection | None = None,
        *,
        kubeconfig: str | Path | None = None,
        context: str | None = None,
        field_manager: str = FIELD_MANAGER,
        timeout: float = 30.0,
        retry: RetryPolicy | None = None,
    ) -> None:
        self.aio = AsyncSandboxClient(
            connection,
            kubeconfig=kubeconfig,
            context=context,
            field_manager=field_manager,
            timeout=timeout,
            retry=retry,
        )
        #: The process that made the client: the only one where its thread runs.
        self._pid = os.getpid()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="craft-sandbox-client", daemon=True
        )
        self._thread.start()
        self._lock = threading.Lock()
        self._closed = False
        self._calls: set[concurrent.futures.Future[Any]] = set()

    def __enter__(self) -> SandboxClient:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the HTTP session and stop the client's thread.

        Calls other threads are making end with :class:`SandboxClientError`, once their
        progress callbacks have returned (within 5 s: one still running then is left to
        end on its own, in a daemon thread, which does not hold the process's exit); so
        does any later call. Not from a coroutine-function progress
        callback (the client's own thread). In a process forked from the one that made it,
        it does nothing: the client is the parent's.
        """
        if os.getpid() != self._pid:
            return
        self._refuse_own_thread("close()")
        with self._lock:
            if self._closed:
                return
            self._closed = True
        try:
            asyncio.run_coroutine_threadsafe(self._shutdown(), self._loop).result()
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join()
            with self._lock:
                stuck = list(self._calls)
            for future in stuck:  # a call that ignored its cancellation: release its caller
                future.cancel()
            self._loop.close()

    async def _shutdown(self) -> None:
        """On the client's loop: end the calls still running, then close the session."""
        # Every task on this private loop is a call of the client (or started by one).
        calls = asyncio.all_tasks() - {asyncio.current_task()}
        for task in calls:
            task.cancel()
        if calls:
            await asyncio.wait(calls, timeout=CLOSE_GRACE)
        await self.aio.close()
        await self._loop.shutdown_asyncgens()

    def _refuse_own_thread(self, what: str) -> None:
        if threading.current_thread() is self._thread:
            raise SandboxClientError(
                f"SandboxClient.{what} was called from the client's own thread (an async "
                "progress callback?), where it would wait for itself forever: await "
                "client.aio's method instead, or make the callback a plain function (it then "
                "runs in a thread of its own)"
            )

    def _refuse_other_process(self, what: str) -> None:
        if os.getpid() != self._pid:
            raise SandboxClientError(
                f"SandboxClient.{what} was called in process {os.getpid()}, but the client "
                f"was created in process {self._pid} before it forked (Celery's prefork "
                "pool?): its thread did not survive the fork, so the call would never "
                "return. Create the client after the fork, in the process that uses it "
                "(e.g. in Celery's worker_process_init signal, or lazily on first use)"
            )

    def _in_thread(self, callback: ProgressCallback | None) -> ProgressCallback | None:
        """``callback`` as the client's loop calls it: a plain function runs in a worker
        thread, so that it blocks only the wait that reports to it (each report awaited
        before the next, so they stay in order; a wait that times out or is cancelled ends
        only once its report has returned, as the caller may close what it writes to next);
        a coroutine function as it is."""
        if callback is None or inspect.iscoroutinefunction(callback):
            return callback
        plain = callback

        async def report(progress: Progress) -> None:
            running = _in_daemon_thread(plain, progress)
            try:
                result = await asyncio.shield(running)
            except asyncio.CancelledError:
                await asyncio.wait({running})
                raise
            if inspect.isawaitable(result):
                await result

        return report

    def _run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        try:
            what = getattr(coroutine, "__name__", "call") + "()"
            self._refuse_other_process(what)
            self._refuse_own_thread(what)
            with self._lock:
                if self._closed:
                    raise SandboxClientError("the SandboxClient is closed")
                future = asyncio.run_coroutine_threadsafe(coroutine, self._loop)
                self._calls.add(future)
        except BaseException:
            coroutine.close()
            raise
        try:
            return future.result()
        except concurrent.futures.CancelledError:
            if self._closed:
                raise SandboxClientError(
                    "the SandboxClient was closed while this call was running"
                ) from None
            raise
        except BaseException:
            future.cancel()  # e.g. KeyboardInterrupt: do not leave the call running
            raise
        finally:
            with self._lock:
                self._calls.discard(future)

    def ensure(
        self,
        namespace: str,
        name: str,
        *,
        user_id: str,
        tenant_id: str = "public",
        sources: Iterable[Source | str] | None = None,
        email: str | None = None,
        labels: Mapping[str, str] | None = None,
        force: bool = False,
        workspace: Workspace | Mapping[str, Any] | None = None,
        **spec: Any,
    ) -> CraftSandbox:
        """See :meth:`AsyncSandboxClient.ensure`."""
        return self._run(
            self.aio.ensure(
                namespace,
                name,
                user_id=user_id,
                tenant_id=tenant_id,
                sources=sources,
                email=email,
                labels=labels,
                force=force,
                workspace=workspace,
                **spec,
            )
        )

    def get(self, namespace: str, name: str) -> CraftSandbox:
        """See :meth:`AsyncSandboxClient.get`."""
        return self._run(self.aio.get(namespace, name))

    def status(self, namespace: str, name: str) -> CraftSandboxStatus:
        """See :meth:`AsyncSandboxClient.status`."""
        return self._run(self.aio.status(namespace, name))

    def pod_name(self, namespace: str, name: str) -> str | None:
        """See :meth:`AsyncSandboxClient.pod_name`."""
        return self._run(self.aio.pod_name(namespace, name))

    def wait_ready(
        self,
        namespace: str,
        name: str,
        *,
        timeout: float = 300.0,
        on_progress: ProgressCallback | None = None,
    ) -> CraftSandbox:
        """See :meth:`AsyncSandboxClient.wait_ready`. A plain-function ``on_progress`` runs
        in a worker thread, a coroutine function on the client's thread."""
        return self._run(
            self.aio.wait_ready(
                namespace, name, timeout=timeout, on_progress=self._in_thread(on_progress)
            )
        )

    def touch(self, namespace: str, name: str, *, at: datetime | None = None) -> datetime:
        """See :meth:`AsyncSandboxClient.touch`."""
        return self._run(self.aio.touch(namespace, name, at=at))

    def notify_library_changed(
        self,
        namespace: str,
        name: str,
        revision: str | None = None,
        *,
        wait: bool = False,
        timeout: float = 300.0,
    ) -> str:
        """See :meth:`AsyncSandboxClient.notify_library_changed`."""
        return self._run(
            self.aio.notify_library_changed(namespace, name, revision, wait=wait, timeout=timeout)
        )

    def sleep(
        self, namespace: str, name: str, *, wait: bool = False, timeout: float = 120.0
    ) -> None:
        """See :meth:`AsyncSandboxClient.sleep`."""
        self._run(self.aio.sleep(namespace, name, wait=wait, timeout=timeout))

    def wake(
        self,
        namespace: str,
        name: str,
        *,
        wait: bool = False,
        timeout: float = 300.0,
        on_progress: ProgressCallback | None = None,
    ) -> None:
        """See :meth:`AsyncSandboxClient.wake` (``on_progress`` as in :meth:`wait_ready`)."""
        callback = self._in_thread(on_progress)
        self._run(self.aio.wake(namespace, name, wait=wait, timeout=timeout, on_progress=callback))

    def delete(
        self, namespace: str, name: str, *, wait: bool = False, timeout: float = 120.0
    ) -> bool:
        """See :meth:`AsyncSandboxClient.delete`."""
        return self._run(self.aio.delete(namespace, name, wait=wait, timeout=timeout))


def _in_daemon_thread(callback: ProgressCallback, progress: Progress) -> asyncio.Future[object]:
    """``callback(progress)`` in a daemon thread of its own; its outcome, on the running loop.

    Not an executor's thread: those are joined at the interpreter's exit, so a callback
    stuck for good, which close() leaves to end on its own, would keep the process from
    exiting. (Nor the loop's default executor: aiohttp resolves host names there.)
    """
    loop = asyncio.get_running_loop()
    outcome: asyncio.Future[object] = loop.create_future()

    def settle(result: object, error: BaseException | None) -> None:
        if outcome.done():
            return
        if error is not None:
            outcome.set_exception(error)
        else:
            outcome.set_result(result)

    def run() -> None:
        result: object = None
        error: BaseException | None = None
        try:
            result = callback(progress)
        except BaseException as exc:  # as an executor would: the wait raises it
            error = exc
        with contextlib.suppress(RuntimeError):  # the client was closed: nothing waits
            loop.call_soon_threadsafe(settle, result, error)

    threading.Thread(target=run, name="craft-sandbox-callback", daemon=True).start()
    return outcome
