"""``craft-operator doctor``'s checks: settings, database, key ring, S3 and the Kubernetes API.

Each check returns :class:`CheckResult` lines: what is fine, or what is wrong and how to fix
it. Checks only read: a missing SQLite file or development key ring is reported, never
created, and nothing is migrated. No result ever holds a secret: database URLs are shown
with the password masked, key rings by key id, S3 and Kubernetes by endpoint only.

One module per dependency: :mod:`.settings`, :mod:`.database`, :mod:`.key_ring`,
:mod:`.s3` and :mod:`.kubernetes` (the API server, the operator's permissions and its
peering object), each returning :mod:`.results` lines; :func:`run_checks` runs them in
order.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import kopf

from craft_operator.doctor.database import DB_CONNECT_TIMEOUT_S, check_database
from craft_operator.doctor.key_ring import check_key_ring
from craft_operator.doctor.kubernetes import KUBE_TIMEOUT_S, check_kubernetes
from craft_operator.doctor.results import CheckResult, Status, fail, ok, warn
from craft_operator.doctor.s3 import check_s3
from craft_operator.doctor.settings import check_settings
from craft_operator.kube.connection import discover_connection

__all__ = [
    "DB_CONNECT_TIMEOUT_S",
    "KUBE_TIMEOUT_S",
    "CheckResult",
    "Status",
    "check_database",
    "check_key_ring",
    "check_kubernetes",
    "check_s3",
    "check_settings",
    "fail",
    "ok",
    "run_checks",
    "warn",
]


def run_checks(
    *,
    kubernetes: bool = True,
    connect: Callable[[], kopf.ConnectionInfo] = discover_connection,
    peering: str | None = None,
    standalone: bool = False,
) -> list[CheckResult]:
    """Every check, in order; later checks are skipped when the settings cannot be loaded.

    ``peering`` and ``standalone`` say how the operator peers, as ``run``'s options do.
    """
    results, settings = check_settings()
    if settings is None:
        return results
    database, engine = check_database(settings)
    results.extend(database)
    try:
        results.append(check_key_ring(settings, engine))
    finally:
        if engine is not None:
            engine.dispose()
    results.append(check_s3(settings))
    if kubernetes:
        checked = check_kubernetes(
            settings, connect=connect, peering=peering, standalone=standalone
        )
        results.extend(asyncio.run(checked))
    return results
