"""Concurrent ensure calls, from threads and from separate processes, leave one live PAT."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

from craft_operator.credentials import CredentialStore, IssuedCredential, SandboxIdentity
from craft_operator.credentials.store import DEFAULT_RENEWAL_GRACE

from .conftest import Database


def _race(
    calls: int, work: list[SandboxIdentity], store: CredentialStore, user: object
) -> list[IssuedCredential]:
    barrier = threading.Barrier(calls)

    def one(identity: SandboxIdentity) -> IssuedCredential:
        barrier.wait()
        return store.ensure(identity, user_id=user, tenant_id="public")  # type: ignore[arg-type]

    with ThreadPoolExecutor(max_workers=calls) as pool:
        return list(pool.map(one, work))


def test_twenty_concurrent_calls_for_one_sandbox_leave_one_live_pat(
    store: CredentialStore, database: Database
) -> None:
    user = database.new_user()
    sandbox = SandboxIdentity("team-a", "alice", "uid-alice")

    results = _race(20, [sandbox] * 20, store, user)

    assert database.live_pats() == 1
    assert len({result.pat_id for result in results}) == 1
    assert len({result.token.get_secret_value() for result in results}) == 1
    assert sum(result.minted for result in results) == 1


def test_twenty_concurrent_renewals_leave_one_new_pat_and_the_old_one_in_its_grace(
    store: CredentialStore, database: Database, clock: object
) -> None:
    user = database.new_user()
    sandbox = SandboxIdentity("team-a", "alice", "uid-alice")
    first = store.ensure(sandbox, user_id=user, tenant_id="public")
    clock.advance(timedelta(hours=700))  # type: ignore[attr-defined]

    results = _race(20, [sandbox] * 20, store, user)

    assert {result.pat_id for result in results} != {first.pat_id}
    assert len({result.pat_id for result in results}) == 1
    assert {result.grace_pat_id for result in results} == {first.pat_id}
    assert database.live_pats(at=clock.now) == 2  # type: ignore[attr-defined]
    after_grace = clock.now + DEFAULT_RENEWAL_GRACE  # type: ignore[attr-defined]
    assert database.live_pats(at=after_grace) == 1


def test_twenty_sandboxes_called_concurrently_get_twenty_live_pats(
    store: CredentialStore, database: Database
) -> None:
    user = database.new_user()
    sandboxes = [SandboxIdentity("team-a", f"box-{n}", f"uid-{n}") for n in range(20)]

    results = _race(40, sandboxes * 2, store, user)

    assert database.live_pats() == 20
    assert len({result.pat_id for result in results}) == 20


_WORKER = textwrap.dedent(
    """
    import os, sys, threading, time, uuid
    from craft_operator.credentials import CredentialStore, KeyRing, SandboxIdentity
    store = CredentialStore(os.environ["URL"], KeyRing.parse(os.environ["KEYS"]))
    sandbox = SandboxIdentity("team-a", "alice", "uid-alice")
    user = uuid.UUID(os.environ["USER_ID"])
    ids = []
    def one():
        ids.append(store.ensure(sandbox, user_id=user, tenant_id="public").pat_id)
    threads = [threading.Thread(target=one) for _ in range(10)]
    time.sleep(max(0.0, float(os.environ["START_AT"]) - time.time()))
    for thread in threads: thread.start()
    for thread in threads: thread.join()
    store.close()
    print(" ".join(map(str, ids)))
    """
)


def test_two_operator_processes_racing_leave_one_live_pat(
    database: Database, key_entry: str
) -> None:
    user = database.new_user()
    env = {
        **os.environ,
        "URL": database.url,
        "KEYS": key_entry,
        "USER_ID": str(user),
        "START_AT": str(time.time() + 3.0),
    }
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", _WORKER], env=env, stdout=subprocess.PIPE, text=True
        )
        for _ in range(2)
    ]
    outputs = [process.communicate(timeout=120)[0] for process in processes]

    assert [process.returncode for process in processes] == [0, 0]
    pat_ids = {int(word) for output in outputs for word in output.split()}
    assert len(pat_ids) == 1
    assert database.live_pats() == 1
