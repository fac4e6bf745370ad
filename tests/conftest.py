"""Suite-wide configuration: tier markers follow the folder a test lives in."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from craft_operator.devtools.postgres import ThrowawayPostgres
from tests.support.postgres import throwaway_postgres

TIERS = {"unit", "integration", "cluster", "e2e", "resilience"}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark each test with its tier (``unit``, ``integration``, ...) from its folder."""
    for item in items:
        parts = Path(str(item.fspath)).parts
        for tier in TIERS & set(parts):
            item.add_marker(getattr(pytest.mark, tier))


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[ThrowawayPostgres]:
    """One throwaway PostgreSQL server for the whole run (skipped where there is none)."""
    yield from throwaway_postgres()
