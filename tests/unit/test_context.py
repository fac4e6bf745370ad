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
    assert context.services.library_pool.wake == context.queue.add


def test_the_orphan_sweep_still_looks_at_namespaces_a_start_left_out(tmp_path: Path) -> None:
    """A served namespace being deleted (or gone) is not watched, but the PATs left there
    are the sweep's to revoke once it is gone."""
    context = build_context(Settings(state_dir=tmp_path, server_url="http://onyx.test:8080"))
    context.gate.namespaces = ("team-a",)
    context.unserved = ("doomed",)
    assert context.sweeper is not None
    assert context.sweeper._namespaces() == ("team-a", "doomed")

    context.gate.namespaces = ()  # every namespace: nothing to add
    assert context.sweeper._namespaces() == ()
