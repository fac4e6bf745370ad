"""Serving ``/metrics`` with aiohttp in the operator's own event loop: a loop that is stuck
stops answering scrapes, which the ``up`` alert notices."""

from __future__ import annotations

import errno
import logging
import socket

from aiohttp import web
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder

from craft_operator.config import Settings
from craft_operator.metrics.recorder import Metrics

#: The package's logger, as before the module became a package.
log = logging.getLogger("craft_operator.metrics")

#: The hosts that mean every address: IPv6 and IPv4 (``None`` is the default).
WILDCARDS = (None, "", "::")
#: Where every address is bound: IPv6's wildcard, taking IPv4 connections too (dual stack).
_DUAL_STACK: tuple[int, str] = (socket.AF_INET6, "::")
_IPV4_ONLY: tuple[int, str] = (socket.AF_INET, "0.0.0.0")  # noqa: S104 -- a scrape target
#: What binding IPv6 fails with on a machine without it (not built in, or turned off);
#: anything else (a port in use) is an error, not a reason to fall back to IPv4.
_NO_IPV6 = frozenset({errno.EAFNOSUPPORT, errno.EADDRNOTAVAIL, errno.EPROTONOSUPPORT})


class MetricsPortError(OSError):
    """The metrics port (CRAFT_METRICS_PORT) cannot be served; the message says so in a line."""


class MetricsServer:
    """A running ``/metrics`` endpoint; :meth:`stop` closes it."""

    def __init__(self, runner: web.AppRunner, host: str | None, port: int) -> None:
        self._runner = runner
        self.host = host
        self.port = port

    @property
    def url(self) -> str:
        """The scrape URL (with the port actually bound; over IPv4 on a wildcard)."""
        host = "127.0.0.1" if self.host in (*WILDCARDS, "0.0.0.0") else self.host  # noqa: S104
        assert host is not None
        return f"http://{f'[{host}]' if ':' in host else host}:{self.port}/metrics"

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


def _bound(family: int, address: str, port: int) -> socket.socket:
    """A TCP socket of ``family`` bound to ``address:port`` (IPv6: taking IPv4 too)."""
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        sock.bind((address, port))
    except OSError:
        sock.close()
        raise
    return sock


def wildcard_socket(port: int) -> socket.socket:
    """A socket bound to every address on ``port``: one dual-stack IPv6 socket, which IPv4
    clients reach too; IPv4 only on a machine without IPv6 (``OSError`` if the port is
    taken, either way)."""
    try:
        return _bound(*_DUAL_STACK, port)
    except OSError as exc:
        if exc.errno not in _NO_IPV6:
            raise
        log.debug("no IPv6 here (%s): serving the metrics over IPv4 only", exc)
    return _bound(*_IPV4_ONLY, port)


def _site(runner: web.AppRunner, host: str | None, port: int) -> web.BaseSite:
    """Where ``runner`` listens: every address (see :func:`wildcard_socket`), or ``host``."""
    if host in WILDCARDS:
        return web.SockSite(runner, wildcard_socket(port))
    return web.TCPSite(runner, host, port, reuse_address=True)


async def start_metrics_server(
    registry: CollectorRegistry, port: int, host: str | None = None
) -> MetricsServer:
    """Serve ``registry`` on ``host:port`` in the running event loop.

    ``host`` ``None`` (or ``"::"``) serves every address, IPv6 and IPv4, and IPv4 alone
    where the machine has no IPv6: Prometheus scrapes the pod IP, of either family.
    ``port=0`` binds a free port (tests use it with ``host="127.0.0.1"``); in the operator,
    :func:`start_from_settings` treats CRAFT_METRICS_PORT=0 as "disabled" instead.
    """
    runner = web.AppRunner(metrics_app(registry), access_log=None, handle_signals=False)
    await runner.setup()
    try:
        await _site(runner, host, port).start()
    except OSError:
        await runner.cleanup()
        raise
    bound = port
    for address in runner.addresses:
        if isinstance(address, tuple) and len(address) >= 2:
            bound = int(address[1])
            break
    log.info("serving Prometheus metrics on %s port %d (/metrics)", host or "every address", bound)
    return MetricsServer(runner, host, bound)


async def start_from_settings(metrics: Metrics, settings: Settings) -> MetricsServer | None:
    """Serve ``metrics`` on every address at CRAFT_METRICS_PORT; ``None`` when it is 0.

    A port that cannot be bound raises :class:`MetricsPortError`, naming the setting.
    """
    port = settings.metrics_port
    if port == 0:
        log.info("Prometheus metrics are disabled (CRAFT_METRICS_PORT=0)")
        return None
    try:
        return await start_metrics_server(metrics.registry, port)
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise MetricsPortError(
            f"cannot serve the metrics on port {port} (CRAFT_METRICS_PORT): {reason}; stop "
            "what holds it, or set CRAFT_METRICS_PORT to a free port (0 turns the metrics off)"
        ) from exc
