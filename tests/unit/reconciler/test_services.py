"""Specification of the reconciler's adapters: the credential store with a memory that
reads each PAT once per resync interval (real SQLite store), and the SKILL.md renderer with
its template ConfigMap (emulator)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from craft_operator.api.models import ANNOTATION_PAT_REVOKED, CraftSandbox
from craft_operator.config import Settings
from craft_operator.credentials.errors import CredentialsError
from craft_operator.credentials.factory import build_credential_store
from craft_operator.credentials.keyring import generate_key_entry
from craft_operator.credentials.store import CredentialStore
from craft_operator.reconciler.services import StoreCredentials
from tests.unit.reconciler.conftest import NAMESPACE
from tests.unit.reconciler.parsed import make_sandbox

LIFETIME = timedelta(hours=100)
HOUR = timedelta(hours=1)
#: How long a pass takes from its PAT's check to the timing of its next visit.
PASS = timedelta(milliseconds=10)


class Clock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = datetime.now(UTC)

    def __call__(self) -> datetime:
        return self.now

    def advance(self, delta: timedelta) -> None:
        """Move time forward."""
        self.now += delta


@pytest.fixture
def store(tmp_path: Path) -> Iterator[CredentialStore]:
    """A real credential store on SQLite."""
    settings = Settings(state_dir=tmp_path, encryption_keys=generate_key_entry("t"))
    built = build_credential_store(settings)
    yield built
    built.close()


@pytest.fixture
def clock() -> Clock:
    """The adapter's clock."""
    return Clock()


@pytest.fixture
def credentials(store: CredentialStore, clock: Clock) -> StoreCredentials:
    """The adapter, reading each PAT at least every 300 s (CRAFT_RESYNC_INTERVAL's default)."""
    return StoreCredentials(store, recheck_interval=300, renewal_fraction=0.2, clock=clock)


async def an_hour_of_passes(
    credentials: StoreCredentials, clock: Clock, sandbox: CraftSandbox, every: timedelta
) -> int:
    """The database calls of an hour of passes over ``sandbox``, each coming back after
    ``every`` or by the time its PAT is to be read again (as the credentials step asks),
    after the pass that made it Ready."""
    issued = await credentials.ensure(sandbox)
    before = credentials.database_calls
    end = clock.now + HOUR
    while True:
        assert issued.recheck_at is not None
        clock.now = min(clock.now + PASS + every, issued.recheck_at)
        if clock.now > end:
            return credentials.database_calls - before
        issued = await credentials.ensure(sandbox)


# -- StoreCredentials ----------------------------------------------------------------------


async def test_the_first_ensure_mints_through_the_database(credentials: StoreCredentials) -> None:
    issued = await credentials.ensure(make_sandbox())
    assert issued.minted
    assert issued.token.get_secret_value().startswith("onyx_pat_")
    assert credentials.database_calls == 1


async def test_a_second_ensure_within_the_recheck_interval_makes_no_database_call(
    credentials: StoreCredentials, clock: Clock
) -> None:
    first = await credentials.ensure(make_sandbox())
    clock.advance(timedelta(seconds=260))
    second = await credentials.ensure(make_sandbox())
    assert credentials.database_calls == 1
    assert not second.minted
    assert second.pat_id == first.pat_id
    assert second.token.get_secret_value() == first.token.get_secret_value()


async def test_a_remembered_pat_reads_as_reused_not_as_just_minted(
    credentials: StoreCredentials,
) -> None:
    """The store documents ``reason`` and ``superseded_pat_id`` as set only by a mint."""
    first = await credentials.ensure(make_sandbox())
    assert first.minted
    assert first.reason is not None
    again = await credentials.ensure(make_sandbox())
    assert credentials.database_calls == 1
    assert (again.minted, again.reason, again.superseded_pat_id) == (False, None, None)


async def test_after_the_recheck_interval_the_database_is_asked_again(
    credentials: StoreCredentials, clock: Clock
) -> None:
    first = await credentials.ensure(make_sandbox())
    clock.advance(timedelta(seconds=300))
    second = await credentials.ensure(make_sandbox())
    assert credentials.database_calls == 2
    assert not second.minted
    assert second.pat_id == first.pat_id


async def test_a_little_before_the_recheck_interval_is_up_the_database_is_asked_already(
    credentials: StoreCredentials, clock: Clock
) -> None:
    """The pass that comes back when the interval is up reads, even on a wall clock that
    runs a little slow against the work queue's timers."""
    await credentials.ensure(make_sandbox())
    clock.advance(timedelta(seconds=297))
    await credentials.ensure(make_sandbox())
    assert credentials.database_calls == 2


async def test_a_remembered_pat_says_when_it_is_read_again(
    credentials: StoreCredentials, clock: Clock
) -> None:
    """A pass between two reads (a pod's event, the idle check) comes back by the next read:
    a PAT revoked out of band is noticed within the interval, whatever brings the passes."""
    checked = clock.now
    first = await credentials.ensure(make_sandbox())
    clock.advance(timedelta(seconds=260))
    remembered = await credentials.ensure(make_sandbox())
    assert credentials.database_calls == 1
    assert first.recheck_at == remembered.recheck_at == checked + timedelta(seconds=300)


@pytest.mark.parametrize(
    "every",
    [
        pytest.param(timedelta(seconds=1), id="a pass every second"),
        pytest.param(timedelta(seconds=60), id="the idle check's"),
        pytest.param(timedelta(seconds=300), id="the resync's"),
    ],
)
async def test_an_unchanged_sandbox_reads_the_database_once_per_resync_interval(
    store: CredentialStore, clock: Clock, every: timedelta
) -> None:
    """With the production settings: a sandbox with an idle timeout is visited every
    CRAFT_IDLE_CHECK_INTERVAL, yet its PAT is read only as often as README promises an
    out-of-band revocation is noticed (every CRAFT_RESYNC_INTERVAL), and no less often."""
    settings = Settings()
    credentials = StoreCredentials.for_settings(settings, store, clock=clock)
    calls = await an_hour_of_passes(credentials, clock, make_sandbox(), every)
    assert calls == HOUR.total_seconds() // settings.resync_interval


async def test_a_resync_interval_under_a_minute_reads_the_pat_once_a_minute(
    store: CredentialStore, clock: Clock
) -> None:
    """A CRAFT_RESYNC_INTERVAL set low (for drift, say) does not read every sandbox's PAT
    from the database that often too: at 1 s, 1,000 sandboxes would be 1,000 reads a
    second on Onyx's Postgres."""
    settings = Settings(resync_interval=5)
    credentials = StoreCredentials.for_settings(settings, store, clock=clock)
    calls = await an_hour_of_passes(credentials, clock, make_sandbox(), timedelta(seconds=5))
    assert calls == HOUR.total_seconds() // 60


async def test_a_wall_clock_stepped_back_a_little_neither_holds_nor_delays_the_read(
    store: CredentialStore, clock: Clock
) -> None:
    """The memory ages on the monotonic clock: a step back of the wall clock shorter than
    the PAT's age (NTP) does not put its next read off by the step's length."""
    ticks = [0.0]
    credentials = StoreCredentials(store, clock=clock, ticks=lambda: ticks[0])
    await credentials.ensure(make_sandbox())
    ticks[0] += 295
    clock.advance(timedelta(seconds=5))  # 295 s passed; the wall clock stepped back 290 s

    remembered = await credentials.ensure(make_sandbox())

    assert credentials.database_calls == 1
    assert remembered.recheck_at == clock.now + timedelta(seconds=5)
    ticks[0] += 5
    clock.advance(timedelta(seconds=5))
    await credentials.ensure(make_sandbox())
    assert credentials.database_calls == 2


async def test_a_changed_lifetime_is_read_at_once(
    credentials: StoreCredentials,
) -> None:
    """A shortened lifetime may replace the PAT: not up to a recheck interval later."""
    first = await credentials.ensure(make_sandbox())
    shortened = await credentials.ensure(make_sandbox(lifetime="1h"))
    assert credentials.database_calls == 2
    assert shortened.minted
    assert shortened.pat_id != first.pat_id


async def test_a_wall_clock_stepped_back_asks_the_database_again(
    credentials: StoreCredentials, clock: Clock
) -> None:
    """NTP stepping the clock back an hour must not hold the remembered PAT for that hour
    (revocations in Onyx would go unseen)."""
    await credentials.ensure(make_sandbox())
    clock.advance(-timedelta(hours=1))
    await credentials.ensure(make_sandbox())
    assert credentials.database_calls == 2


async def test_a_pat_revoked_by_hand_is_replaced_at_once_once_the_sandbox_says_so(
    credentials: StoreCredentials, store: CredentialStore
) -> None:
    """`credentials revoke` annotates the sandbox: not up to a recheck interval later."""
    first = await credentials.ensure(make_sandbox())
    store.revoke_named(NAMESPACE, "alice")  # what the command does to the database
    annotated = make_sandbox()
    annotated.metadata.annotations[ANNOTATION_PAT_REVOKED] = str(first.pat_id)

    unannotated = await credentials.ensure(make_sandbox())
    fresh = await credentials.ensure(annotated)
    again = await credentials.ensure(annotated)

    assert unannotated.pat_id == first.pat_id  # remembered: no database call
    assert fresh.minted
    assert fresh.pat_id != first.pat_id
    assert (again.minted, again.pat_id) == (False, fresh.pat_id)
    assert credentials.database_calls == 2


async def test_a_replica_that_stood_by_asks_the_database_again(
    credentials: StoreCredentials,
) -> None:
    """The other replica may have renewed and retired the PAT meanwhile."""
    await credentials.ensure(make_sandbox())
    await credentials.forget_all()
    await credentials.ensure(make_sandbox())
    assert credentials.database_calls == 2


async def test_a_pass_for_a_deleted_sandbox_leaves_its_recreated_namesakes_pat(
    credentials: StoreCredentials, store: CredentialStore
) -> None:
    """The sandbox's creation time reaches the store: a stale copy of the deleted sandbox
    (a replica not yet standing by) mints nothing over the one made since."""
    deleted = make_sandbox("alice", "uid-first", created="2026-11-29T09:00:00Z")
    reborn = make_sandbox("alice", "uid-reborn", created="2026-11-29T09:05:00Z")
    live = await credentials.ensure(reborn)

    with pytest.raises(CredentialsError, match="created since"):
        await credentials.ensure(deleted)

    shown = store.show(NAMESPACE, "alice")
    assert shown is not None
    assert shown.pat_id == live.pat_id


async def test_the_memory_is_per_sandbox(credentials: StoreCredentials) -> None:
    alice = await credentials.ensure(make_sandbox("alice", "uid-alice"))
    bob = await credentials.ensure(make_sandbox("bob", "uid-bob"))
    assert credentials.database_calls == 2
    assert alice.pat_id != bob.pat_id


async def test_inside_the_renewal_window_the_database_is_asked_every_time(
    store: CredentialStore, clock: Clock
) -> None:
    credentials = StoreCredentials(store, recheck_interval=10**9, clock=clock)
    issued = await credentials.ensure(make_sandbox())
    renew_at = issued.expires_at - LIFETIME * 0.2
    clock.now = renew_at - timedelta(seconds=1)
    await credentials.ensure(make_sandbox())
    assert credentials.database_calls == 1
    clock.now = renew_at + timedelta(seconds=1)
    await credentials.ensure(make_sandbox())
    await credentials.ensure(make_sandbox())
    assert credentials.database_calls == 3


async def test_a_rejected_pat_bypasses_the_memory_and_is_replaced(
    credentials: StoreCredentials,
) -> None:
    first = await credentials.ensure(make_sandbox())
    replaced = await credentials.ensure(make_sandbox(), rejected_pat_id=first.pat_id)
    assert credentials.database_calls == 2
    assert replaced.minted
    assert replaced.pat_id != first.pat_id
    again = await credentials.ensure(make_sandbox())
    assert credentials.database_calls == 2
    assert again.pat_id == replaced.pat_id


async def test_revoke_forgets_the_remembered_pat(
    credentials: StoreCredentials, store: CredentialStore
) -> None:
    first = await credentials.ensure(make_sandbox())
    assert await credentials.revoke(NAMESPACE, "alice", "uid-alice")
    assert credentials.database_calls == 2
    assert store.show(NAMESPACE, "alice") is None  # the token is forgotten with the PAT
    again = await credentials.ensure(make_sandbox())
    assert credentials.database_calls == 3
    assert again.minted
    assert again.pat_id != first.pat_id


async def renewed_in_place(credentials: StoreCredentials, clock: Clock) -> tuple[int, int]:
    """Mint alice's PAT, then renew it (a shortened lifetime is a renewal); returns the
    first PAT's id and the renewed one's."""
    first = await credentials.ensure(make_sandbox())
    clock.advance(timedelta(seconds=60))
    renewed = await credentials.ensure(make_sandbox(lifetime="24h"))
    assert renewed.minted
    assert renewed.grace_pat_id == first.pat_id
    return first.pat_id, renewed.pat_id


async def test_retire_revokes_the_superseded_pat_and_the_memory_forgets_it(
    credentials: StoreCredentials, clock: Clock
) -> None:
    first, renewed = await renewed_in_place(credentials, clock)
    remembered = await credentials.ensure(make_sandbox(lifetime="24h"))
    assert (remembered.minted, remembered.grace_pat_id) == (False, first)
    calls = credentials.database_calls

    assert await credentials.retire(NAMESPACE, "alice", "uid-alice", renewed) == first
    assert await credentials.retire(NAMESPACE, "alice", "uid-alice", renewed) is None

    again = await credentials.ensure(make_sandbox(lifetime="24h"))
    assert credentials.database_calls == calls + 2  # the two retires; ensure remembered
    assert (again.pat_id, again.grace_pat_id) == (renewed, None)


async def test_retire_of_another_pat_leaves_the_memory_alone(
    credentials: StoreCredentials, clock: Clock
) -> None:
    first, renewed = await renewed_in_place(credentials, clock)

    assert await credentials.retire(NAMESPACE, "alice", "uid-alice", first) is None

    again = await credentials.ensure(make_sandbox(lifetime="24h"))
    assert (again.pat_id, again.grace_pat_id) == (renewed, first)


async def test_a_remembered_pat_drops_the_one_in_its_grace_once_the_grace_is_over(
    store: CredentialStore, clock: Clock
) -> None:
    credentials = StoreCredentials(store, recheck_interval=10**9, clock=clock)
    first = await credentials.ensure(make_sandbox())
    credentials.forget("uid-alice")  # so that the next call asks the database
    renewed = await credentials.ensure(make_sandbox(lifetime="24h"))
    assert renewed.grace_pat_id == first.pat_id
    assert renewed.grace_expires_at is not None

    clock.now = renewed.grace_expires_at - timedelta(seconds=1)
    during = await credentials.ensure(make_sandbox(lifetime="24h"))
    clock.now = renewed.grace_expires_at
    after = await credentials.ensure(make_sandbox(lifetime="24h"))

    assert during.grace_pat_id == first.pat_id
    assert after.grace_pat_id is None
    assert not after.minted


async def test_revoking_a_sandbox_without_credentials_is_false(
    credentials: StoreCredentials,
) -> None:
    assert not await credentials.revoke(NAMESPACE, "nobody", "uid-nobody")


async def test_a_store_factory_is_opened_once_on_first_use(tmp_path: Path) -> None:
    settings = Settings(state_dir=tmp_path, encryption_keys=generate_key_entry("t"))
    opened: list[CredentialStore] = []

    def factory() -> CredentialStore:
        opened.append(build_credential_store(settings))
        return opened[-1]

    credentials = StoreCredentials(factory)
    assert opened == []
    await asyncio.gather(
        credentials.ensure(make_sandbox("a", "uid-a")),
        credentials.ensure(make_sandbox("b", "uid-b")),
        credentials.ensure(make_sandbox("c", "uid-c")),
    )
    assert len(opened) == 1
    credentials.close()


async def test_a_failing_factory_is_retried_on_the_next_call(tmp_path: Path) -> None:
    settings = Settings(state_dir=tmp_path, encryption_keys=generate_key_entry("t"))
    attempts: list[int] = []

    def factory() -> CredentialStore:
        attempts.append(1)
        if len(attempts) == 1:
            raise ConnectionError("database down")
        return build_credential_store(settings)

    credentials = StoreCredentials(factory)
    with pytest.raises(ConnectionError):
        await credentials.ensure(make_sandbox())
    issued = await credentials.ensure(make_sandbox())
    assert issued.minted
    credentials.close()
