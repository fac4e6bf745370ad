"""Credentials kept fresh for the operator's own API client.

kopf logs in again only after one of its own requests is refused (401), and it makes
almost none: every watch and write of the operator goes through :class:`KubeClient`. A
projected service-account token (rotated by the kubelet, bound to an hour or so) or an
exec plugin's token would then expire under the operator, and every request fail with
401 until a restart. So the credentials are read again, as client-go re-reads its token
file: every minute, and at once after a 401; the client is handed them only when they
changed (its sessions carry the headers, and are replaced).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

import kopf

from craft_operator.kube.client import KubeClient

logger = logging.getLogger(__name__)

#: Seconds between two readings of the credentials.
REFRESH_SECONDS = 60.0
#: Seconds at least between two readings, however often requests are refused.
MIN_SPACING = 5.0

Reader = Callable[[], Awaitable[kopf.ConnectionInfo | None]]


async def keep_fresh(
    kube: KubeClient,
    read: Reader,
    *,
    every: float = REFRESH_SECONDS,
    spacing: float = MIN_SPACING,
) -> None:
    """Read the credentials every ``every`` seconds, and after a 401 (at most once per
    ``spacing`` seconds); hand them to ``kube`` when they changed. Runs until cancelled."""
    await kube.connected.wait()
    while True:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(every):
                await kube.unauthorized.wait()
        kube.unauthorized.clear()
        try:
            info = await read()
        except Exception as exc:  # a kubeconfig broken meanwhile: keep what works
            logger.warning("cannot read the Kubernetes credentials again: %s", exc)
            info = None
        if info is not None and info != kube.info:
            kube.configure(info)
            logger.info("Kubernetes credentials renewed")
        await asyncio.sleep(spacing)
