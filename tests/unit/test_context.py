"""The handlers' memo holds the one services object; its settings, client and cache are those."""

from __future__ import annotations

from pathlib import Path

import pytest

from craft_operator.config import Settings
from craft_operator.runtime import build_context

pytestmark = pytest.mark.unit


def test_the_memo_exposes_one_services_object(tmp_path: Path) -> None:
    context = build_context(Settings(state_dir=tmp_path, server_url="http://onyx.test:8080"))

    services = context.services
    assert (context.settings, context.kube, context.cache, context.events) == (
        services.settings,
        services.kube,
        services.cache,
        services.events,
    )
    assert context.services.library_pool.wake == context.queue.wake
    assert context.services.deliveries.wake == context.queue.wake


def test_every_library_sync_allowed_leaves_an_exec_stream_for_each_delivery(
    tmp_path: Path,
) -> None:
    # Syncs and PAT/SKILL.md deliveries share the exec session's streams: with fewer, the
    # syncs could hold them all and a delivery's timeout run out waiting for one.
    settings = Settings(state_dir=tmp_path, library_sync_concurrency=256)

    services = build_context(settings).services

    needed = services.library_pool.concurrency + services.deliveries.limit
    assert services.kube.max_streams > needed
