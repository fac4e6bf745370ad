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
import os
import re
from collections.abc import Callable, Mapping

import kopf
from sqlalchemy import Engine

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
    "unexpected_failure",
    "warn",
]


#: The environment variables whose values are secret, whole.
SECRET_VARIABLES = ("CRAFT_ENCRYPTION_KEYS", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN")


def _secret_parts(environ: Mapping[str, str]) -> list[str]:
    """What a message must not quote, longest first: each secret variable's value, each
    key of the key ring, and the database URL's user info, its password and each piece
    of that (a malformed URL's parser may split it at any ':', '@' or '/'); a URL without
    a scheme, whole."""
    parts = {environ.get(variable) or "" for variable in SECRET_VARIABLES}
    for entry in (environ.get("CRAFT_ENCRYPTION_KEYS") or "").split(","):
        parts.add(entry.partition(":")[2].strip())
    url = environ.get("CRAFT_DATABASE_URL") or ""
    _, separator, rest = url.partition("://")
    userinfo = rest.rpartition("@")[0] if separator else url
    password = userinfo.partition(":")[2]
    parts |= {userinfo, password, *re.split(r"[:@/]", password)}
    return sorted((part for part in parts if len(part) >= 3), key=len, reverse=True)


def unexpected_failure(
    name: str, exc: Exception, environ: Mapping[str, str] | None = None
) -> CheckResult:
    """The failed line of check ``name``, which raised what it does not expect: the
    error's type and message (every secret in it masked), never a traceback."""
    message = str(exc)
    for part in _secret_parts(os.environ if environ is None else environ):
        message = message.replace(part, "***")
    detail = f"the check failed unexpectedly: {type(exc).__name__}"
    if message:
        detail += f": {message}"
    return fail(name, detail, "check the settings it reads; if they are right, report a bug")


def run_checks(
    *,
    kubernetes: bool = True,
    connect: Callable[[], kopf.ConnectionInfo] = discover_connection,
    peering: str | None = None,
    standalone: bool = False,
) -> list[CheckResult]:
    """Every check, in order; later checks are skipped when the settings cannot be loaded.

    ``peering`` and ``standalone`` say how the operator peers, as ``run``'s options do. A
    check that raises fails its own line (:func:`unexpected_failure`) and the others still
    run: one bad value must not hide what else is wrong.
    """
    try:
        results, settings = check_settings()
    except Exception as exc:
        return [unexpected_failure("settings", exc)]
    if settings is None:
        return results
    peered = not standalone and bool(peering or settings.peering_name)
    engine: Engine | None = None
    try:
        database, engine = check_database(settings, peering=peered)
    except Exception as exc:
        database = [unexpected_failure("database", exc)]
    results.extend(database)
    try:
        results.append(check_key_ring(settings, engine, peering=peered))
    except Exception as exc:
        results.append(unexpected_failure("key ring", exc))
    finally:
        if engine is not None:
            engine.dispose()
    try:
        results.append(check_s3(settings))
    except Exception as exc:
        results.append(unexpected_failure("S3", exc))
    if kubernetes:
        checked = check_kubernetes(
            settings, connect=connect, peering=peering, standalone=standalone
        )
        try:
            results.extend(asyncio.run(checked))
        except Exception as exc:
            results.append(unexpected_failure("Kubernetes API", exc))
    return results
