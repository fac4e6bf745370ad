"""Specification of the credential store adapter against a database that hangs: every call
fails within its bound with a clear error, the passes after it go on, the database threads
never outnumber their bound, and a thread stuck for good holds neither close nor exit."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest
from pydantic import SecretStr

from craft_operator.config import Settings
from craft_operator.credentials.errors import DatabaseUnavailableError
from craft_operator.credentials.factory import build_credential_store
from craft_operator.credentials.keyring import generate_key_entry
from craft_operator.credentials.model import Revocation
from craft_operator.credentials.store import CredentialStore
from craft_operator.reconciler.services import StoreCredentials
from craft_operator.reconciler.steps.credentials import failure_reason
from tests.support.silent_server import SilentServer
from tests.unit.reconciler.test_services import make_sandbox

pytestmark = pytest.mark.unit

_T = TypeVar("_T")

BOUND = 0.3  # seconds: the call timeout of these tests (the operator's is 60 s)


@pytest.fixture
def silent() -> Iterator[SilentServer]:
    """A Postgres that accepts connections and never answers (until the test ends)."""
    with SilentServer() as server:
        yield server


@pytest.fixture
def release() -> Iterator[threading.Event]:
    """Set to free the calls that hang on it (set at the end of the test in any case)."""
    event = threading.Event()
    yield event
    event.set()


@pytest.fixture
def sqlite_store(tmp_path: Path) -> Iterator[CredentialStore]:
    """A real credential store on SQLite."""
    settings = Settings(state_dir=tmp_path, encryption_keys=generate_key_entry("t"))
    built = build_credential_store(settings)
    yield built
    built.close()


def silent_settings(tmp_path: Path, silent: SilentServer) -> Settings:
    """Settings whose database is the silent server; psycopg's own connect wait is the
    longest there is, so only the adapter's bound can end a call in time."""
    return Settings(
        state_dir=tmp_path,
        database_url=SecretStr(silent.postgres_url(connect_timeout="0")),
        cluster_id="test",
        encryption_keys=generate_key_entry("t"),
    )


def database_threads(before: set[threading.Thread]) -> list[threading.Thread]:
    """The live database threads started since ``before`` was taken."""
    return [
        thread
        for thread in threading.enumerate()
        if thread.name.startswith("craft-db") and thread not in before
    ]


def hang_on(event: threading.Event) -> Callable[[CredentialStore], None]:
    """A database call that hangs until ``event`` is set."""

    def call(store: CredentialStore) -> None:
        event.wait()

    return call


async def test_ensure_against_a_database_that_never_answers_fails_within_the_bound(
    tmp_path: Path, silent: SilentServer
) -> None:
    settings = silent_settings(tmp_path, silent)
    credentials = StoreCredentials(lambda: build_credential_store(settings), call_timeout=BOUND)
    started = time.monotonic()

    with pytest.raises(DatabaseUnavailableError) as caught:
        await credentials.ensure(make_sandbox())

    assert time.monotonic() - started < BOUND + 1
    assert str(caught.value) == (
        f"ensuring the PAT of {make_sandbox().metadata.namespace}/alice: "
        f"the credentials database did not answer within {BOUND:g} s (retried)"
    )
    assert failure_reason(caught.value) == "DatabaseUnavailable"
    assert silent.connections == 1  # it did reach the database, which said nothing
    credentials.close()


async def test_passes_waiting_for_a_hung_opening_share_it_and_each_ends_within_the_bound(
    tmp_path: Path, silent: SilentServer
) -> None:
    settings = silent_settings(tmp_path, silent)
    before = set(threading.enumerate())
    credentials = StoreCredentials(
        lambda: build_credential_store(settings), call_timeout=BOUND, opening_bound=10 * BOUND
    )

    for _ in range(3):  # one pass after the other, as the reconciler retries
        outcomes = await asyncio.gather(
            *(credentials.ensure(make_sandbox(f"s{i}", f"uid-{i}")) for i in range(5)),
            return_exceptions=True,
        )
        assert all(isinstance(outcome, DatabaseUnavailableError) for outcome in outcomes)

    assert len(database_threads(before)) == 1  # the one opening, not one per pass
    assert silent.connections == 1
    credentials.close()


async def test_hung_calls_never_hold_more_threads_than_the_bound(
    sqlite_store: CredentialStore, release: threading.Event
) -> None:
    before = set(threading.enumerate())
    credentials = StoreCredentials(sqlite_store, call_timeout=BOUND, threads=2)

    for _ in range(4):  # each timed-out pass frees its slot; the next starts another call
        outcomes = await asyncio.gather(
            *(credentials.call(hang_on(release)) for _ in range(3)), return_exceptions=True
        )
        assert all(isinstance(outcome, DatabaseUnavailableError) for outcome in outcomes)

    assert len(database_threads(before)) == 2
    credentials.close()


async def test_passes_go_on_while_the_database_threads_hang_and_succeed_once_freed(
    sqlite_store: CredentialStore, release: threading.Event
) -> None:
    credentials = StoreCredentials(sqlite_store, call_timeout=BOUND, threads=1)
    with pytest.raises(DatabaseUnavailableError):
        await credentials.call(hang_on(release))
    started = time.monotonic()

    with pytest.raises(DatabaseUnavailableError, match="did not answer"):
        await credentials.ensure(make_sandbox())  # its turn never comes: bounded anyway
    assert time.monotonic() - started < BOUND + 1

    release.set()
    issued = await answered(lambda: credentials.ensure(make_sandbox()))
    assert issued.pat_id
    credentials.close()


async def test_a_call_abandoned_while_queued_never_runs(
    sqlite_store: CredentialStore, release: threading.Event
) -> None:
    credentials = StoreCredentials(sqlite_store, call_timeout=BOUND, threads=1)
    ran: list[str] = []
    with pytest.raises(DatabaseUnavailableError):
        await credentials.call(hang_on(release))
    with pytest.raises(DatabaseUnavailableError):  # queued behind the hung one, given up
        await credentials.call(lambda store: ran.append("ran"))

    release.set()
    assert await credentials.call(lambda store: "later") == "later"
    assert ran == []
    credentials.close()


async def answered(call: Callable[[], Awaitable[_T]], attempts: int = 10) -> _T:
    """``call()``, retried after a pause while the database does not answer in time."""
    for _ in range(attempts - 1):
        try:
            return await call()
        except DatabaseUnavailableError:
            await asyncio.sleep(BOUND)
    return await call()


def recording(
    close: Callable[[], None], closed: list[CredentialStore], store: CredentialStore
) -> Callable[[], None]:
    """``close``, which also appends ``store`` to ``closed``."""

    def closing() -> None:
        closed.append(store)
        close()

    return closing


async def test_an_opening_hung_for_twice_the_call_timeout_is_abandoned_and_its_late_store_closed(
    tmp_path: Path, release: threading.Event, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = Settings(state_dir=tmp_path, encryption_keys=generate_key_entry("t"))
    opened: list[CredentialStore] = []
    closed: list[CredentialStore] = []
    # Built beforehand: the bound is the service's, not a measure of how fast a store is
    # built (on a loaded machine that alone took longer than BOUND).
    built = [build_credential_store(settings), build_credential_store(settings)]

    def factory() -> CredentialStore:
        store = built[len(opened)]
        monkeypatch.setattr(store, "close", recording(store.close, closed, store))
        opened.append(store)
        if len(opened) == 1:
            release.wait()  # the first opening hangs, as a migration waiting on a lock does
        return store

    credentials = StoreCredentials(factory, call_timeout=BOUND)
    with pytest.raises(DatabaseUnavailableError, match="did not answer"):
        await credentials.ensure(make_sandbox())
    await asyncio.sleep(BOUND + 0.05)  # the opening has now been pending for over 2 x BOUND

    # The pass after it opens anew; on a loaded machine the fresh store's first ensure may
    # itself outlast BOUND, so it is retried as the reconciler would (a wait on the hung
    # opening would fail every time).
    issued = await answered(lambda: credentials.ensure(make_sandbox()))
    release.set()  # the abandoned opening ends after all
    for _ in range(200):
        if closed:
            break
        await asyncio.sleep(0.01)

    assert issued.pat_id
    assert closed == [opened[0]]
    assert await credentials.call(lambda store: store) is opened[1]
    credentials.close()
    assert closed == [opened[0], opened[1]]


async def test_a_closed_adapter_refuses_calls_with_a_clear_error(
    sqlite_store: CredentialStore,
) -> None:
    credentials = StoreCredentials(sqlite_store)
    credentials.close()

    with pytest.raises(DatabaseUnavailableError, match="closed"):
        await credentials.ensure(make_sandbox())


# -- exit ----------------------------------------------------------------------------------

HUNG_OPERATOR = """
import asyncio, sys, time
import uvloop
from pydantic import SecretStr
from craft_operator.config import Settings
from craft_operator.credentials.errors import DatabaseUnavailableError
from craft_operator.credentials.factory import build_credential_store
from craft_operator.credentials.keyring import generate_key_entry
from craft_operator.api.parse import parse_sandbox
from craft_operator.reconciler.services import StoreCredentials
import craft_operator.credentials.store  # SQLAlchemy and Alembic: imported before the clock runs

SANDBOX = {
    "apiVersion": "craft.onyx.app/v1alpha1",
    "kind": "CraftSandbox",
    "metadata": {"name": "alice", "namespace": "ns", "uid": "uid-alice", "generation": 1},
    "spec": {"user": {"id": "3f2b8c1e-9d4a-4e6b-8f0a-1c2d3e4f5a6b"}},
}

settings = Settings(
    state_dir=sys.argv[1],
    database_url=SecretStr(sys.argv[2]),
    cluster_id="test",
    encryption_keys=generate_key_entry("t"),
)

async def main():
    credentials = StoreCredentials(lambda: build_credential_store(settings), call_timeout=2)
    try:
        await credentials.ensure(parse_sandbox(SANDBOX))
    except DatabaseUnavailableError:
        print("timed out", flush=True)
    credentials.close()

factory = uvloop.new_event_loop if sys.argv[3] == "uvloop" else None
with asyncio.Runner(loop_factory=factory) as runner:
    runner.run(main())
print("closed", flush=True)
"""


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_a_process_exits_promptly_after_close_though_a_database_thread_hangs(
    tmp_path: Path, silent: SilentServer, loop: str
) -> None:
    url = silent.postgres_url(connect_timeout="0")  # psycopg then waits 130 s
    process = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(HUNG_OPERATOR), str(tmp_path), url, loop],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).parents[3],
    )
    try:
        out, err = process.communicate(timeout=20)
    except subprocess.TimeoutExpired:
        process.kill()
        out, err = process.communicate()
        pytest.fail(f"the process did not exit while its database thread hung: {out!r} {err}")

    assert (process.returncode, out.split()) == (0, ["timed", "out", "closed"]), err
    assert silent.connections == 1  # the thread was still waiting on it at exit


class HangingEnsure(CredentialStore):
    """A real store on SQLite whose ensure waits for ``release`` before it runs."""

    release: threading.Event

    def ensure(self, *args: object, **kwargs: object) -> object:  # type: ignore[override]
        self.release.wait()
        return super().ensure(*args, **kwargs)  # type: ignore[arg-type]


async def test_a_pat_is_not_revoked_while_an_ensure_its_pass_gave_up_on_still_runs(
    sqlite_store: CredentialStore, release: threading.Event
) -> None:
    """Else the ensure, landing after the revoke, would mint a PAT nobody revokes (or take
    the row of a sandbox created later under the same name)."""
    sqlite_store.__class__ = HangingEnsure
    sqlite_store.release = release  # type: ignore[attr-defined]
    credentials = StoreCredentials(sqlite_store, call_timeout=BOUND)
    sandbox = make_sandbox()

    with pytest.raises(DatabaseUnavailableError):
        await credentials.ensure(sandbox)  # the database is slow: the pass gives up
    with pytest.raises(DatabaseUnavailableError, match="an earlier call for this sandbox"):
        await credentials.revoke("craft-sandboxes", "alice", "uid-alice")  # the finalizer

    release.set()  # the slow call ends: it minted after all
    for _ in range(50):
        if not credentials._ages("uid-alice"):
            break
        await asyncio.sleep(0.02)
    assert await credentials.revoke("craft-sandboxes", "alice", "uid-alice") is Revocation.REVOKED
    assert sqlite_store.show("craft-sandboxes", "alice") is None, "nothing left unrevoked"
    credentials.close()


async def test_a_call_that_never_ends_holds_a_sandboxs_revocation_for_five_call_timeouts_only(
    sqlite_store: CredentialStore, release: threading.Event, caplog: pytest.LogCaptureFixture
) -> None:
    sqlite_store.__class__ = HangingEnsure
    sqlite_store.release = release  # type: ignore[attr-defined]
    credentials = StoreCredentials(sqlite_store, call_timeout=BOUND)
    with pytest.raises(DatabaseUnavailableError):
        await credentials.ensure(make_sandbox())  # a lock the database never gives
    with pytest.raises(DatabaseUnavailableError):
        await credentials.revoke("craft-sandboxes", "alice", "uid-alice")

    await asyncio.sleep(5 * BOUND)
    await credentials.revoke("craft-sandboxes", "alice", "uid-alice")

    assert "a PAT it mints afterwards is revoked by the orphan sweep" in caplog.text
    credentials.close()


async def test_a_sandbox_whose_call_outlived_its_pass_makes_no_other_until_it_ends(
    sqlite_store: CredentialStore, release: threading.Event
) -> None:
    """Each retry would take another of the threads every sandbox shares, all waiting on
    the same locked row, until none is left for the other sandboxes."""
    before = set(threading.enumerate())
    sqlite_store.__class__ = HangingEnsure
    sqlite_store.release = release  # type: ignore[attr-defined]
    credentials = StoreCredentials(sqlite_store, call_timeout=BOUND)
    sandbox = make_sandbox()
    with pytest.raises(DatabaseUnavailableError, match="did not answer"):
        await credentials.ensure(sandbox)  # a row locked elsewhere: the pass gives up
    await asyncio.sleep(BOUND)  # the retries come after a backoff

    for _ in range(3):  # the pass's retries
        with pytest.raises(DatabaseUnavailableError, match="an earlier call for this sandbox"):
            await credentials.ensure(sandbox, rejected_pat_id=1)
    assert len(database_threads(before)) == 1  # one thread held, not four

    release.set()  # the lock is let go: the earlier call ends
    for _ in range(50):
        if not credentials._ages("uid-alice"):
            break
        await asyncio.sleep(0.02)
    assert (await answered(lambda: credentials.ensure(sandbox))).pat_id
    credentials.close()
