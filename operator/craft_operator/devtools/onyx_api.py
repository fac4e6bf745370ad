"""A stand-in Onyx API server that authenticates PATs the way Onyx does.

For tests and the kind setup, never for production. It serves what ``onyx-cli
validate-config`` asks for, against the same database as the credential store:

* ``GET /api/`` answers 200 (reachability);
* ``GET /api/me`` authenticates the PAT: ``X-Onyx-Authorization`` (else ``Authorization``)
  must be ``Bearer onyx_pat_...``; the token's SHA-256 must match a row that is not
  revoked, whose ``expires_at`` is null or in the future, and (in Onyx mode) whose user is
  active. Otherwise 401;
* ``GET /api/version`` answers ``{"backend_version": ...}`` without authentication.

Run it with ``python -m craft_operator.devtools.onyx_api --port 8080``; it prints
``listening on http://HOST:PORT`` once it accepts connections. For a kind cluster, point
it at the operator's database: the same SQLite file (a sidecar sharing the state volume)
or a Postgres bootstrapped with ``--create-onyx-tables --user <uuid>``.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
import uuid
from collections.abc import Callable
from datetime import datetime
from typing import Any, cast

from aiohttp import web
from sqlalchemy import Engine, Table, and_, or_, select, update

from craft_operator.credentials.db import WRITE_OPTION, create_credentials_engine, is_onyx_mode
from craft_operator.credentials.store import utc_now
from craft_operator.credentials.tables import OnyxUser, PersonalAccessToken
from craft_operator.credentials.tokens import PAT_PREFIX, hash_token
from craft_operator.devtools.onyx_schema import add_user, create_onyx_tables

log = logging.getLogger(__name__)

DEFAULT_BACKEND_VERSION = "3.0.0"
_BEARER = "Bearer "
_PAT = cast(Table, PersonalAccessToken.__table__)
_USER = cast(Table, OnyxUser.__table__)
#: Onyx refreshes ``last_used_at`` at most this often per token.
_LAST_USED_GRANULARITY_S = 300

ENGINE_KEY = web.AppKey("engine", Engine)
VERSION_KEY = web.AppKey("backend_version", str)
Clock = Callable[[], datetime]
CLOCK_KEY: web.AppKey[Clock] = web.AppKey("clock")


def hashed_token_from_headers(headers: Any) -> str | None:
    """The SHA-256 of the request's PAT, or None when it carries no PAT (Onyx's rules)."""
    header = headers.get("X-Onyx-Authorization") or headers.get("Authorization")
    if not header or not header.startswith(_BEARER):
        return None
    token = header[len(_BEARER) :].strip()
    if not token.startswith(PAT_PREFIX):
        return None
    return hash_token(token)


def authenticate(engine: Engine, hashed: str, now: datetime) -> dict[str, Any] | None:
    """The PAT's owner and scopes if the hash names a live PAT of an active user."""
    query = select(_PAT.c.id, _PAT.c.user_id, _PAT.c.pat_type, _PAT.c.scopes, _PAT.c.last_used_at)
    conditions = [
        _PAT.c.hashed_token == hashed,
        # As Onyx's server decides: by the expiry alone (is_revoked is its audit trail).
        or_(_PAT.c.expires_at.is_(None), _PAT.c.expires_at > now),
    ]
    if is_onyx_mode(engine):
        query = query.join(_USER, _USER.c.id == _PAT.c.user_id)
        conditions.append(_USER.c.is_active.is_(True))
    with engine.connect() as connection:
        row = connection.execute(query.where(and_(*conditions))).one_or_none()
    if row is None:
        return None
    last_used = row.last_used_at
    if last_used is None or (now - last_used).total_seconds() > _LAST_USED_GRANULARITY_S:
        # A write transaction of its own: on SQLite, a read transaction that turns into a
        # write while another connection writes fails at once ("database is locked").
        writer = engine.execution_options(**{WRITE_OPTION: True})
        with writer.begin() as connection:
            connection.execute(update(_PAT).where(_PAT.c.id == row.id).values(last_used_at=now))
    return {
        "id": str(row.user_id),
        "is_active": True,
        "pat_id": row.id,
        "pat_type": str(row.pat_type.value if hasattr(row.pat_type, "value") else row.pat_type),
        "scopes": row.scopes,
    }


async def _root(request: web.Request) -> web.Response:
    return web.json_response({"status": "ok"})


async def _version(request: web.Request) -> web.Response:
    return web.json_response({"backend_version": request.app[VERSION_KEY]})


async def _me(request: web.Request) -> web.Response:
    hashed = hashed_token_from_headers(request.headers)
    user = None
    if hashed is not None:
        engine, now = request.app[ENGINE_KEY], request.app[CLOCK_KEY]()
        user = await asyncio.to_thread(authenticate, engine, hashed, now)
    if user is None:
        return web.json_response(
            {"detail": "Access denied. User is not authenticated."}, status=401
        )
    return web.json_response(user)


def create_app(
    engine: Engine,
    *,
    backend_version: str = DEFAULT_BACKEND_VERSION,
    clock: Callable[[], datetime] = utc_now,
) -> web.Application:
    """The stand-in API as an aiohttp application over ``engine``."""
    app = web.Application()
    app[ENGINE_KEY] = engine
    app[VERSION_KEY] = backend_version
    app[CLOCK_KEY] = clock
    app.router.add_get("/api/", _root)
    app.router.add_get("/api", _root)
    app.router.add_get("/api/me", _me)
    app.router.add_get("/api/version", _version)
    return app


async def serve(engine: Engine, host: str, port: int, backend_version: str) -> None:
    """Serve until cancelled, announcing the bound address on stdout."""
    runner = web.AppRunner(create_app(engine, backend_version=backend_version))
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    await site.start()
    bound = runner.addresses[0]
    print(f"listening on http://{bound[0]}:{bound[1]}", flush=True)
    try:
        await asyncio.Event().wait()
    finally:
        await runner.cleanup()


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(
        prog="python -m craft_operator.devtools.onyx_api",
        description="Stand-in Onyx API that validates PATs (tests and kind only).",
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8080, help="0 picks a free port")
    parser.add_argument(
        "--database-url",
        help="SQLAlchemy URL of the credentials database (default: CRAFT_DATABASE_URL)",
    )
    parser.add_argument("--backend-version", default=DEFAULT_BACKEND_VERSION)
    parser.add_argument(
        "--create-onyx-tables",
        action="store_true",
        help="Postgres only: create Onyx's user and personal_access_token tables if missing",
    )
    parser.add_argument(
        "--user",
        dest="users",
        action="append",
        default=[],
        type=uuid.UUID,
        metavar="UUID",
        help="Postgres only: make sure this active Onyx user exists (repeatable)",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    url = args.database_url
    if url is None:
        from craft_operator.config import SettingsError, load_settings

        try:
            url = load_settings().database_url_value
        except SettingsError as exc:
            print(f"onyx_api: {exc}", file=sys.stderr)
            return 2
    engine = create_credentials_engine(url)
    if (args.create_onyx_tables or args.users) and not is_onyx_mode(engine):
        print("onyx_api: --create-onyx-tables and --user need a Postgres URL", file=sys.stderr)
        return 2
    try:
        if args.create_onyx_tables:
            create_onyx_tables(engine)
        for user in args.users:
            add_user(engine, user_id=user)
        asyncio.run(serve(engine, args.host, args.port, args.backend_version))
    except KeyboardInterrupt:
        pass
    finally:
        engine.dispose()
    return 0


if __name__ == "__main__":
    sys.exit(main())
