"""Assemble and run the kopf operator: registry, kopf settings, login and services."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Collection
from typing import Any

import kopf

from craft_operator import handlers
from craft_operator.api.models import GROUP
from craft_operator.config import Settings
from craft_operator.context import OperatorContext
from craft_operator.kube.connection import discover_connection

LoginFn = Callable[..., kopf.ConnectionInfo | None]
FINALIZER = f"{GROUP}/finalizer"


def configure_kopf(settings: kopf.OperatorSettings) -> None:
    """Production kopf settings: bounded timeouts, our own annotation keys, no status.kopf."""
    # Handler progress and the diff base live in our annotations: the CRD's status schema is
    # structural, so kopf's default status.kopf field would be pruned by the API server.
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=GROUP)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=GROUP, key="last-handled-configuration"
    )
    settings.persistence.finalizer = FINALIZER
    # A watch that silently stalls is the worst failure of an operator: make the server end
    # each watch, and the client give up shortly after if it does not.
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 330
    settings.watching.connect_timeout = 10
    settings.networking.request_timeout = 60
    settings.networking.connect_timeout = 10
    settings.posting.level = logging.INFO
    settings.batching.error_delays = [1, 2, 5, 10, 30, 60, 120]


def build_registry(login: LoginFn | None = None) -> kopf.OperatorRegistry:
    """A fresh registry with all handlers, and a login handler (the real one by default)."""
    registry = kopf.OperatorRegistry()
    handlers.register(registry)

    def _login(**_: Any) -> kopf.ConnectionInfo | None:
        return discover_connection()

    kopf.on.login(registry=registry)(login or _login)
    return registry


async def run_operator(
    settings: Settings,
    *,
    namespaces: Collection[str] = (),
    standalone: bool = False,
    liveness_endpoint: str | None = None,
    login: LoginFn | None = None,
    stop_flag: asyncio.Event | None = None,
    ready_flag: asyncio.Event | None = None,
    foreign_tasks: set[asyncio.Task[Any]] | None = None,
) -> None:
    """Run the operator until ``stop_flag`` is set (or forever).

    On shutdown kopf cancels every task in the loop that it did not see before it started.
    ``foreign_tasks`` names tasks that are not the operator's (e.g. a test harness waiting
    for it to stop); the caller may add to the set while the operator runs.
    """
    registry = build_registry(login=login)
    kopf_settings = kopf.OperatorSettings()
    configure_kopf(kopf_settings)
    ignored = set(foreign_tasks) if foreign_tasks is not None else set()
    ignored.update(asyncio.all_tasks())
    if foreign_tasks is not None:
        foreign_tasks.update(ignored)
        ignored = foreign_tasks
    tasks = await kopf.spawn_tasks(
        registry=registry,
        settings=kopf_settings,
        memo=OperatorContext(settings=settings),
        clusterwide=not namespaces,
        namespaces=list(namespaces),
        standalone=standalone,
        liveness_endpoint=liveness_endpoint,
        stop_flag=stop_flag,
        ready_flag=ready_flag,
    )
    await kopf.run_tasks(tasks, ignored=ignored)
