"""The stand-in Onyx API authenticates PATs as Onyx does, and the real onyx-cli agrees."""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from aiohttp.test_utils import TestClient, TestServer
from sqlalchemy import select

from craft_operator.credentials import (
    CredentialStore,
    IssuedCredential,
    KeyRing,
    SandboxIdentity,
)
from craft_operator.credentials.db import create_credentials_engine, upgrade
from craft_operator.credentials.tables import PersonalAccessToken
from craft_operator.devtools.onyx_api import create_app
from craft_operator.devtools.onyx_schema import set_user_active
from craft_operator.devtools.postgres import ThrowawayPostgres

from .conftest import Clock, Database

SANDBOX = SandboxIdentity("team-a", "alice", "uid-alice")


def _onyx_cli() -> str:
    beside_python = Path(sys.executable).parent / "onyx-cli"
    found = str(beside_python) if beside_python.exists() else shutil.which("onyx-cli")
    if found is None:
        pytest.skip(
            "onyx-cli is not installed (it comes with the test extra: pip install '.[test]')"
        )
    return found


@pytest.fixture
async def client(database: Database) -> AsyncIterator[TestClient]:
    async with TestClient(TestServer(create_app(database.engine))) as test_client:
        yield test_client


def bearer(issued: IssuedCredential) -> str:
    return f"Bearer {issued.token.get_secret_value()}"


async def test_me_accepts_a_live_pat_in_either_header(
    client: TestClient, store: CredentialStore, database: Database
) -> None:
    issued = store.ensure(SANDBOX, user_id=database.new_user(), tenant_id="public")

    for header in ("Authorization", "X-Onyx-Authorization"):
        response = await client.get("/api/me", headers={header: bearer(issued)})
        assert response.status == 200, header
        assert (await response.json())["pat_id"] == issued.pat_id


async def test_x_onyx_authorization_takes_precedence(
    client: TestClient, store: CredentialStore, database: Database
) -> None:
    issued = store.ensure(SANDBOX, user_id=database.new_user(), tenant_id="public")

    response = await client.get(
        "/api/me",
        headers={"X-Onyx-Authorization": "Bearer onyx_pat_wrong", "Authorization": bearer(issued)},
    )

    assert response.status == 401


@pytest.mark.parametrize(
    "header",
    ["", "Basic abc", "Bearer not-a-pat", "onyx_pat_without_bearer", "Bearer onyx_pat_unknown"],
)
async def test_me_refuses_anything_but_a_bearer_pat_it_knows(
    client: TestClient, header: str
) -> None:
    response = await client.get("/api/me", headers={"Authorization": header} if header else {})

    assert response.status == 401


async def test_root_and_version_need_no_token(client: TestClient) -> None:
    assert (await client.get("/api/")).status == 200
    version = await client.get("/api/version")
    assert (await version.json()) == {"backend_version": "3.0.0"}


async def test_use_is_recorded_in_last_used_at(
    client: TestClient, store: CredentialStore, database: Database
) -> None:
    issued = store.ensure(SANDBOX, user_id=database.new_user(), tenant_id="public")

    await client.get("/api/me", headers={"Authorization": bearer(issued)})

    with database.engine.connect() as connection:
        last_used = connection.execute(
            select(PersonalAccessToken.last_used_at).where(PersonalAccessToken.id == issued.pat_id)
        ).scalar_one()
    assert last_used is not None


@pytest.mark.postgres
async def test_an_inactive_users_pat_is_refused(onyx_database: Database, keyring: KeyRing) -> None:
    upgrade(onyx_database.engine)
    store = CredentialStore(onyx_database.engine, keyring)
    user = onyx_database.new_user()
    issued = store.ensure(SANDBOX, user_id=user, tenant_id="public")
    headers = {"Authorization": bearer(issued)}

    async with TestClient(TestServer(create_app(onyx_database.engine))) as client:
        assert (await client.get("/api/me", headers=headers)).status == 200
        set_user_active(onyx_database.engine, user, False)
        assert (await client.get("/api/me", headers=headers)).status == 401


# -- the real onyx-cli against the stand-in, run as a module --------------------------


@pytest.fixture
def server_url(database: Database) -> Iterator[str]:
    with _serve(database.url) as url:
        yield url


@contextlib.contextmanager
def _serve(database_url: str, *extra: str) -> Iterator[str]:
    """Run the stand-in API as a module on a free port; yields its base URL."""
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "craft_operator.devtools.onyx_api",
            "--port",
            "0",
            "--database-url",
            database_url,
            *extra,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline().strip()
        assert line.startswith("listening on "), line
        yield line.removeprefix("listening on ")
    finally:
        process.terminate()
        process.wait(timeout=10)


def validate_config(server_url: str, token: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [_onyx_cli(), "validate-config"],
        env={"ONYX_SERVER_URL": server_url, "ONYX_PAT": token, "HOME": "/nonexistent"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_onyx_cli_accepts_a_minted_token(
    server_url: str, store: CredentialStore, database: Database
) -> None:
    issued = store.ensure(SANDBOX, user_id=database.new_user(), tenant_id="public")

    result = validate_config(server_url, issued.token.get_secret_value())

    assert result.returncode == 0, result.stdout + result.stderr
    assert "connected and authenticated" in result.stdout


def test_onyx_cli_reports_auth_failure_after_revocation(
    server_url: str, store: CredentialStore, database: Database
) -> None:
    issued = store.ensure(SANDBOX, user_id=database.new_user(), tenant_id="public")
    store.revoke(SANDBOX)

    assert validate_config(server_url, issued.token.get_secret_value()).returncode == 4


def test_onyx_cli_reports_auth_failure_after_expiry(
    server_url: str, make_store: Callable[..., CredentialStore], database: Database, clock: Clock
) -> None:
    clock.advance(-timedelta(hours=2))
    issued = make_store().ensure(
        SANDBOX, user_id=database.new_user(), tenant_id="public", lifetime=timedelta(hours=1)
    )

    assert validate_config(server_url, issued.token.get_secret_value()).returncode == 4


def test_onyx_cli_reports_auth_failure_for_a_tampered_token(
    server_url: str, store: CredentialStore, database: Database
) -> None:
    token = store.ensure(
        SANDBOX, user_id=database.new_user(), tenant_id="public"
    ).token.get_secret_value()
    tampered = token[:-1] + ("A" if token[-1] != "A" else "B")

    assert validate_config(server_url, tampered).returncode == 4
    assert validate_config(server_url, token).returncode == 0


@pytest.mark.postgres
def test_the_module_can_bootstrap_onyx_tables_and_users_for_kind(
    postgres_server: ThrowawayPostgres, keyring: KeyRing
) -> None:
    url = postgres_server.create_database()
    user = "3f2b8c1e-9d4a-4e6b-8f0a-1c2d3e4f5a6b"
    with _serve(url, "--create-onyx-tables", "--user", user) as served:
        engine = create_credentials_engine(url)
        upgrade(engine)
        store = CredentialStore(engine, keyring)
        issued = store.ensure(SANDBOX, user_id=user, tenant_id="public")

        assert validate_config(served, issued.token.get_secret_value()).returncode == 0
        engine.dispose()
