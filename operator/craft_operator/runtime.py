"""Assemble and run the kopf operator: registry, kopf settings, login and services."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Collection, Iterable
from typing import Any, cast

import kopf

from craft_operator import handlers
from craft_operator.api.models import GROUP
from craft_operator.config import Settings
from craft_operator.context import OperatorContext
from craft_operator.credentials.factory import build_credential_store
from craft_operator.daemon_threads import in_daemon_thread
from craft_operator.handlers import lifecycle
from craft_operator.handlers import peering as peering_handlers
from craft_operator.kube import kinds
from craft_operator.kube.cache import ObjectCache
from craft_operator.kube.client import KubeClient
from craft_operator.kube.connection import discover_connection
from craft_operator.kube.events import EventRecorder
from craft_operator.kube.exec import ExecTransport
from craft_operator.kube.exec_aiohttp import AiohttpExec
from craft_operator.kube.relogin import keep_fresh
from craft_operator.metrics import Metrics, MetricsPortError, MetricsServer, start_from_settings
from craft_operator.peering.monitor import PeeringMonitor, default_identity
from craft_operator.peering.options import PeeringOptions
from craft_operator.reconciler.deps import Services
from craft_operator.reconciler.detached import DEFAULT_LIMIT as DELIVERIES_LIMIT
from craft_operator.reconciler.detached import DetachedCalls
from craft_operator.reconciler.library_pool import LibrarySyncPool
from craft_operator.reconciler.orphan_sweep import OrphanSweeper
from craft_operator.reconciler.services import LibrarySyncer, StoreCredentials
from craft_operator.reconciler.skill_renderer import SkillRenderer

LoginFn = Callable[..., kopf.ConnectionInfo | None]
#: Exec streams kept beyond the syncs' and deliveries' own: a call that ended may hold its
#: stream a little longer while its connection closes (up to the exec's close grace).
CLOSING_STREAMS_MARGIN = 8
#: The kopf resources whose watches are filtered to the operator's own objects.
CHILD_RESOURCES: tuple[tuple[str, ...], ...] = tuple(
    kind.api.resource for kind in kinds.KINDS if kind.managed_only
)


class StartupError(Exception):
    """An expected failure to start found once :func:`run_operator` runs (a metrics port
    that cannot be bound); ``craft-operator run`` says it in one line, exit code 1."""


class WatchOnlyDiffBase(kopf.AnnotationsDiffBaseStorage):
    """A diff base for an operator whose handlers only watch (``kopf.on.event``).

    kopf computes every event's diff against the last handled state, deep-copying the
    object twice, although only change handlers (``on.create``, ``on.update``, ...) read
    it; here there are none (``tests/unit/test_runtime_kopf.py``), and that copying was a
    tenth of the operator's CPU on a restart. Nothing is built, read or stored.
    """

    def build(
        self,
        *,
        body: kopf.Body,
        extra_fields: Iterable[Any] | None = None,
    ) -> kopf.BodyEssence:
        """An empty essence: no handler compares it."""
        return kopf.BodyEssence()

    def fetch(self, *, body: kopf.Body) -> kopf.BodyEssence | None:
        """No last handled state: none is kept."""
        return None


def configure_kopf(settings: kopf.OperatorSettings) -> None:
    """Production kopf settings (it watches only the peering object): bounded timeouts, our
    annotation keys."""
    # kopf keeps no state on our objects (the handlers only watch), but if it ever does,
    # it goes to our annotations: the structural CRD schema would prune a status.kopf field.
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=GROUP)
    settings.persistence.diffbase_storage = WatchOnlyDiffBase(
        prefix=GROUP, key="last-handled-configuration"
    )
    # A watch that silently stalls is the worst failure of an operator: make the server end
    # each watch, and the client give up shortly after if it does not.
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 330
    settings.watching.connect_timeout = 10
    settings.networking.request_timeout = 60
    settings.networking.connect_timeout = 10
    settings.posting.level = logging.INFO
    settings.batching.error_delays = [1, 2, 5, 10, 30, 60, 120]
    # Peering is either mandatory (--peering) or off; never kopf's auto-detection, which
    # could pause kopf on finding some other "default" peering while our queue works on.
    settings.peering.standalone = True


def exec_streams(settings: Settings) -> int:
    """How many exec streams may be open at once: one for each library sync that may run
    (CRAFT_LIBRARY_SYNC_CONCURRENCY) and each PAT or SKILL.md delivery, plus a margin for
    calls closing. Fewer, and syncs could hold every stream while a delivery's timeout ran
    out waiting for one, blamed on its healthy pod."""
    return settings.library_sync_concurrency + DELIVERIES_LIMIT + CLOSING_STREAMS_MARGIN


def build_context(
    settings: Settings, *, exec_transport: ExecTransport | None = None
) -> OperatorContext:
    """The services and state shared by all handlers."""
    # A retired streams session outlives the longest exec: a library sync's.
    kube = KubeClient(
        request_timeout=60,
        max_streams=exec_streams(settings),
        stream_grace=settings.library_sync_timeout + 60,
    )
    cache = ObjectCache()
    credentials = StoreCredentials.for_settings(settings, lambda: build_credential_store(settings))
    events = EventRecorder(kube)
    metrics = Metrics()
    # Exec rides on the API client: its credentials, SSL context and a pool of its own.
    exec_transport = exec_transport or AiohttpExec(kube)
    services = Services(
        settings=settings,
        kube=kube,
        cache=cache,
        credentials=credentials,
        skills=SkillRenderer(kube, settings),
        exec=exec_transport,
        events=events,
        library=LibrarySyncer(settings, exec_transport, records=credentials),
        metrics=metrics,
        library_pool=LibrarySyncPool(
            settings.library_sync_concurrency, budget_seconds=settings.library_sync_timeout
        ),
        deliveries=DetachedCalls(limit=DELIVERIES_LIMIT),
    )
    context = OperatorContext(services=services, events=events)
    context.gate.stop_also.append(credentials.forget_all)
    context.sweeper = OrphanSweeper(
        credentials=credentials,
        kube=kube,
        cache=cache,
        metrics=metrics,
        cluster_id=settings.effective_cluster_id,
        interval=settings.orphan_sweep_interval,
        active=lambda: context.gate.cache_synced,
        namespaces=lambda: context.gate.namespaces,
    )
    metrics.track(
        cache=cache,
        queue=context.queue,
        queue_backlog=context.queue.backlog,
        longest_running=lambda: max(
            context.queue.longest_running(), context.pool_queue.longest_running()
        ),
        api_requests=kube.requests,
        watch_outcomes=kube.watch_outcomes,
        events=events,
        active=lambda: context.gate.cache_synced,  # not while a takeover still lists
    )
    return context


def build_registry(
    context: OperatorContext,
    login: LoginFn | None = None,
    *,
    monitor: PeeringMonitor | None = None,
) -> kopf.OperatorRegistry:
    """A fresh registry with all handlers and a login handler (the real one by default).

    The login handler also hands the credentials to the operator's own API client (on the
    event loop; the credentials are read in a thread). A peered
    replica's ``monitor`` is registered first, so that it stops before the API client is
    closed (kopf runs the clean-up handlers in order).
    """
    registry = kopf.OperatorRegistry()
    if monitor is not None:
        peering_handlers.register(registry, monitor)
    handlers.register(registry)

    async def _read(**kwargs: Any) -> kopf.ConnectionInfo | None:
        # Reading the credentials may block (a kubeconfig's exec plugin waiting for a
        # login): in a daemon thread, which a read still hanging does not hold the exit on.
        if login is not None:
            return await in_daemon_thread(login, **kwargs)
        return await in_daemon_thread(discover_connection)

    async def _login(**kwargs: Any) -> kopf.ConnectionInfo | None:
        # The client is configured on the event loop, which owns its sessions and Events.
        info = await _read(**kwargs)
        if info is not None:
            context.kube.configure(info)
        return info

    async def _keep_credentials_fresh(**_: Any) -> None:
        task = asyncio.create_task(keep_fresh(context.kube, _read), name="refresh-credentials")
        context.background.add(task)

    kopf.on.login(registry=registry)(_login)
    kopf.on.startup(registry=registry, id="refresh-credentials")(_keep_credentials_fresh)
    return registry


def _kopf_settings(namespaces: Collection[str], peering: PeeringOptions) -> kopf.OperatorSettings:
    """kopf's settings for this run: production ones, plus what the namespaces and the
    peering change."""
    kopf_settings = kopf.OperatorSettings()
    configure_kopf(kopf_settings)
    if namespaces:
        # The namespaces are exact names. kopf's scanning would list and watch every
        # namespace in the cluster (a cluster-wide grant the operator does not otherwise
        # need) and wait a minute before falling back when refused. Without it kopf treats
        # the names as given and finds the CRD by one discovery at start.
        kopf_settings.scanning.disabled = True
    if not peering.standalone:
        kopf_settings.peering.lifetime = peering.lifetime
    return kopf_settings


async def _start_gate(
    context: OperatorContext, peering: PeeringOptions, identity: str
) -> PeeringMonitor | None:
    """Close the activity gate until the operator may work; a peered replica's monitor."""
    if peering.standalone:
        await context.gate.hold_until_primed()
        return None
    monitor = PeeringMonitor(
        kube=context.kube, gate=context.gate, options=peering, identity=identity
    )
    # A standby until the peering object says otherwise, as kopf's mandatory peering is.
    await context.gate.deactivate("the peering object is not read yet")
    return monitor


def _ignored_tasks(foreign_tasks: set[asyncio.Task[Any]] | None) -> set[asyncio.Task[Any]]:
    """The tasks kopf must not cancel on shutdown: those running now and ``foreign_tasks``.

    When given, ``foreign_tasks`` itself is returned (grown by the running ones), so that
    the caller's later additions count too.
    """
    ignored = set(foreign_tasks) if foreign_tasks is not None else set()
    ignored.update(asyncio.all_tasks())
    if foreign_tasks is not None:
        foreign_tasks.update(ignored)
        ignored = foreign_tasks
    return ignored


async def _shut_down(context: OperatorContext, metrics_server: MetricsServer | None) -> None:
    """Stop the metrics server, the library syncs and PAT deliveries still running (a stop
    without a drain: a second signal, the caller's flag) and the credential store."""
    if metrics_server is not None:
        await metrics_server.stop()
    await context.services.library_pool.close()
    await context.services.deliveries.drain(0)
    credentials = context.services.credentials
    if isinstance(credentials, StoreCredentials):
        credentials.close()


async def _serve_metrics(context: OperatorContext, settings: Settings) -> MetricsServer | None:
    """Bind CRAFT_METRICS_PORT, before anything else starts: a port that cannot be bound
    ends the start with one line (:class:`StartupError`), with nothing of kopf to undo."""
    try:
        return await start_from_settings(context.services.metrics, settings)
    except MetricsPortError as exc:
        await _shut_down(context, None)
        raise StartupError(str(exc)) from exc


async def run_operator(
    settings: Settings,
    *,
    namespaces: Collection[str] = (),
    standalone: bool = False,
    peering: PeeringOptions | None = None,
    liveness_endpoint: str | None = None,
    login: LoginFn | None = None,
    exec_transport: ExecTransport | None = None,
    stop_flag: asyncio.Event | None = None,
    ready_flag: asyncio.Event | None = None,
    foreign_tasks: set[asyncio.Task[Any]] | None = None,
    context: OperatorContext | None = None,
) -> None:
    """Run the operator until ``stop_flag`` is set (or forever), in ``namespaces`` (empty:
    all).

    Without ``peering`` (or with a standalone one) the operator runs alone, ``standalone`` or
    not. With a peering name it is one of an active/standby pair: kopf keeps its record in
    the peering object and pauses its watches on a standby, and a
    :class:`~craft_operator.peering.monitor.PeeringMonitor` pauses the operator's own work
    queue by the same rule (see :mod:`craft_operator.peering.gate`).

    On shutdown kopf cancels every task in the loop that it did not see before it started.
    ``foreign_tasks`` names tasks that are not the operator's (e.g. a test harness waiting
    for it to stop); the caller may add to the set while the operator runs.

    The metrics port is bound first: if it cannot be, :class:`StartupError` says so
    before kopf starts anything. A stop (``stop_flag``, SIGTERM or SIGINT) drains the work
    queues before kopf stops and removes the replica's peering record
    (:mod:`craft_operator.handlers.lifecycle`).
    """
    peering = peering or PeeringOptions()
    if standalone and not peering.standalone:
        raise TypeError("standalone=True contradicts peering through a peering object")
    context = context or build_context(settings, exec_transport=exec_transport)
    metrics_server = await _serve_metrics(context, settings)
    try:
        context.gate.namespaces = tuple(namespaces)
        kopf_settings = _kopf_settings(namespaces, peering)
        identity = peering.identity or default_identity()
        monitor = await _start_gate(context, peering, identity)
        registry = build_registry(context, login=login, monitor=monitor)
        ignored = _ignored_tasks(foreign_tasks)
        requested = stop_flag or asyncio.Event()
        context.stop_requested = requested
        kopf_stop = asyncio.Event()
        tasks = await kopf.spawn_tasks(
            registry=registry,
            settings=kopf_settings,
            memo=context,
            clusterwide=not namespaces,
            namespaces=list(namespaces),
            standalone=peering.standalone,
            peering_name=peering.name,
            priority=peering.priority,
            # kopf's Identity is a NewType of str that kopf does not export.
            identity=cast("Any", identity),
            liveness_endpoint=liveness_endpoint,
            stop_flag=kopf_stop,
            ready_flag=ready_flag,
        )
        lifecycle.catch_stop_signals(requested, kopf_stop)  # after kopf's: they replace its own
        lifecycle.dump_tasks_on_signal()
        stopping = asyncio.create_task(
            lifecycle.stop_in_order(context, requested, kopf_stop), name="drain, then stop"
        )
        ignored.add(stopping)
        try:
            await kopf.run_tasks(tasks, ignored=ignored)
        finally:
            stopping.cancel()
    finally:
        await _shut_down(context, metrics_server)
