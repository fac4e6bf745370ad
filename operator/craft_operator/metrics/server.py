"""Serving ``/metrics`` with aiohttp in the operator's own event loop: a loop that is stuck
stops answering scrapes, which the ``up`` alert notices."""

from __future__ import annotations

import logging

from aiohttp import web
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder

from craft_operator.config import Settings
from craft_operator.metrics.recorder import Metrics

#: The package's logger, as before the module became a package.
log = logging.getLogger("craft_operator.metrics")


class MetricsServer:
    """A running ``/metrics`` endpoint; :meth:`stop` closes it."""

    def __init__(self, runner: web.AppRunner, host: str, port: int) -> None:
        self._runner = runner
        self.host = host
        self.port = port

    @property
    def url(self) -> str:
        """The scrape URL (with the port actually bound)."""
        host = "127.0.0.1" if self.host in ("0.0.0.0", "") else self.host  # noqa: S104
        return f"http://{host}:{self.port}/metrics"

    async def stop(self) -> None:
        """Stop serving and release the port."""
        await self._runner.cleanup()


def metrics_app(registry: CollectorRegistry) -> web.Application:
    """An aiohttp application serving ``registry`` at ``/metrics`` (text or OpenMetrics)."""

    async def scrape(request: web.Request) -> web.Response:
        encoder, content_type = choose_encoder(request.headers.get("Accept", ""))
        body = encoder(registry)
        response = web.Response(body=body)
        response.headers["Content-Type"] = content_type
        return response

    app = web.Application()
    app.router.add_get("/metrics", scrape)
    return app


async def start_metrics_server(
    registry: CollectorRegistry,
    port: int,
    host: str = "0.0.0.0",  # noqa: S104 -- Prometheus scrapes the pod IP
) -> MetricsServer:
    """Serve ``registry`` on ``host:port`` in the running event loop.

    ``port=0`` binds a free port (tests use it with ``host="127.0.0.1"``); in the operator,
    :func:`start_from_settings` treats CRAFT_METRICS_PORT=0 as "disabled" instead.
    """
    runner = web.AppRunner(metrics_app(registry), access_log=None, handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, host, port, reuse_address=True)
    try:
        await site.start()
    except OSError:
        await runner.cleanup()
        raise
    bound = port
    for address in runner.addresses:
        if isinstance(address, tuple) and len(address) >= 2:
            bound = int(address[1])
            break
    log.info("serving Prometheus metrics on %s:%d/metrics", host, bound)
    return MetricsServer(runner, host, bound)


async def start_from_settings(metrics: Metrics, settings: Settings) -> MetricsServer | None:
    """Serve ``metrics`` on all interfaces at CRAFT_METRICS_PORT; ``None`` when it is 0."""
    if settings.metrics_port == 0:
        log.info("Prometheus metrics are disabled (CRAFT_METRICS_PORT=0)")
        return None
    return await start_metrics_server(metrics.registry, settings.metrics_port)
