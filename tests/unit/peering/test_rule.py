"""The peering rule pauses and resumes exactly when kopf's own peering does.

The operator cannot see kopf's pause state, so it applies kopf's rule itself. Each case is
fed to kopf's ``process_peering_event`` (with a real toggle, in both starting states) and to
:func:`craft_operator.peering.rule.evaluate`; they must agree. If kopf changes its rule,
these tests fail.
"""

from __future__ import annotations

import asyncio
import inspect
from datetime import UTC, datetime, timedelta
from typing import Any

import kopf
import pytest
from kopf._cogs.aiokits import aiotoggles
from kopf._core.engines import peering as kopf_peering
from kopf._core.reactor import orchestration

from craft_operator.peering import kopf_shield
from craft_operator.peering.rule import evaluate, malformed, records

pytestmark = pytest.mark.unit

ME, PRIORITY, NAME = "craft-operator-1", 10, "craft-operator"
NOW = datetime.now(UTC)


def record(
    priority: int, *, seen_ago: float | None = 0, lifetime: int | None = 60
) -> dict[str, Any]:
    """A keep-alive record as kopf writes it (fields left out where ``None``)."""
    found: dict[str, Any] = {"priority": priority}
    if seen_ago is not None:
        found["lastseen"] = (NOW - timedelta(seconds=seen_ago)).isoformat()
    if lifetime is not None:
        found["lifetime"] = lifetime
    return found


CASES: dict[str, dict[str, Any]] = {
    "nobody": {},
    "only itself": {ME: record(PRIORITY)},
    "a live higher peer": {ME: record(PRIORITY), "craft-operator-0": record(20)},
    "a live peer of the same priority": {ME: record(PRIORITY), "other": record(PRIORITY)},
    "a live lower peer": {ME: record(PRIORITY), "craft-operator-2": record(5)},
    "a dead higher peer": {"craft-operator-0": record(20, seen_ago=7200)},
    "a higher peer that left (lifetime 0)": {"craft-operator-0": record(20, lifetime=0)},
    "a higher peer without lastseen": {"craft-operator-0": record(20, seen_ago=None)},
    "a higher peer without lifetime, seen 30 s ago": {
        "craft-operator-0": record(20, seen_ago=30, lifetime=None)
    },
    "a higher peer without lifetime, seen 90 s ago": {
        "craft-operator-0": record(20, seen_ago=90, lifetime=None)
    },
    "itself with a stale record": {ME: record(PRIORITY, seen_ago=7200)},
}


#: Records no replica writes, each beside a live higher peer and this replica's own.
MALFORMED: dict[str, dict[str, Any]] = {
    "a lifetime past the year 9999": {"priority": 99, "lifetime": 10**20},
    "a lifetime past the year 9999 from now": {"priority": 99, "lifetime": 10**12},
    "a lastseen in the year 9999": {"priority": 99, "lastseen": "9999-12-31T23:59:59+00:00"},
    "a lastseen that is no date": {"priority": 99, "lastseen": "yesterday"},
    "a lastseen that is a number": {"priority": 99, "lastseen": 1700000000},
    "a lastseen that is an ISO week": {"priority": 99, "lastseen": "2026-W01-1"},
    "a priority that is a string": {"priority": "99", "lastseen": NOW.isoformat()},
    "a lifetime that is no number": {"priority": 99, "lifetime": "long"},
    "an identity field": {"priority": 99, "identity": "someone-else"},
}


async def kopf_pauses(
    status: dict[str, Any], *, initially_paused: bool, process: kopf_shield.Process | None = None
) -> bool:
    """Whether kopf's peering leaves the operator paused after seeing ``status``."""
    process = process or kopf_peering.process_peering_event
    settings = kopf.OperatorSettings()
    settings.peering.name = NAME
    settings.peering.priority = PRIORITY
    conflicts = aiotoggles.Toggle(initially_paused)
    pressure = asyncio.Event()
    pressure.set()  # return at once instead of sleeping until a blocking peer expires
    await process(
        raw_event={"type": "MODIFIED", "object": {"metadata": {"name": NAME}, "status": status}},
        namespace=None,
        resource=kopf.Resource("kopf.dev", "v1", "clusterkopfpeerings", namespaced=False),
        identity=kopf_peering.Identity(ME),
        settings=settings,
        autoclean=False,
        stream_pressure=pressure,
        conflicts_found=conflicts,
    )
    return conflicts.is_on()


@pytest.mark.parametrize("initially_paused", [True, False], ids=["from paused", "from active"])
@pytest.mark.parametrize("case", list(CASES))
async def test_the_rule_agrees_with_kopf(case: str, initially_paused: bool) -> None:
    status = CASES[case]
    verdict = evaluate(status, identity=ME, priority=PRIORITY, now=datetime.now(UTC))
    assert verdict.active is not await kopf_pauses(status, initially_paused=initially_paused)


@pytest.mark.parametrize("initially_paused", [True, False], ids=["from paused", "from active"])
@pytest.mark.parametrize("case", list(MALFORMED))
async def test_kopf_shielded_skips_a_malformed_record_as_the_rule_does(
    case: str, initially_paused: bool
) -> None:
    """Unshielded, kopf raised out of its peering observer on such a record, which stopped
    the operator, at every start again while the record stayed."""
    status = {ME: record(PRIORITY), "lower": record(5), "bad": MALFORMED[case]}
    process = kopf_shield.shielded(kopf_peering.process_peering_event)

    paused = await kopf_pauses(status, initially_paused=initially_paused, process=process)

    assert not paused
    assert evaluate(status, identity=ME, priority=PRIORITY, now=datetime.now(UTC)).active
    assert sorted(kopf_shield.readable(status, datetime.now(UTC))) == [ME, "lower"]


def test_kopf_starts_its_peering_with_the_function_the_shield_replaces(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """kopf looks ``process_peering_event`` up in its peering module when its peering starts:
    if it no longer does, the shield shields nothing."""
    assert "peering.process_peering_event" in inspect.getsource(
        orchestration.spawn_missing_peerings
    )
    # kopf's own function again after the test.
    monkeypatch.setattr(kopf_peering, "process_peering_event", kopf_peering.process_peering_event)
    kopf_shield.install()
    shield = kopf_peering.process_peering_event
    kopf_shield.install()  # once only
    assert kopf_peering.process_peering_event is shield
    assert getattr(shield, "craft_shielded", False)


def test_the_rule_names_the_records_it_skips() -> None:
    status = {"bad": MALFORMED["a lastseen that is no date"], "good": record(1), "x": "?"}
    assert malformed(status, NOW) == ["bad", "x"]


def test_the_blockers_are_the_live_peers_with_a_higher_or_equal_priority() -> None:
    status = {
        ME: record(PRIORITY),
        "higher": record(20),
        "same": record(PRIORITY),
        "lower": record(5),
        "dead": record(30, seen_ago=7200),
    }
    verdict = evaluate(status, identity=ME, priority=PRIORITY, now=NOW)
    assert not verdict.active
    assert sorted(peer.identity for peer in verdict.blockers) == ["higher", "same"]
    assert "higher (priority 20)" in verdict.describe()


def test_malformed_records_are_skipped() -> None:
    status = {"a": "not a record", "b": {"priority": "high"}, "c": record(1)}
    assert [peer.identity for peer in records(status, NOW)] == ["c"]


@pytest.mark.parametrize("lifetime", [10**20, 10**12, "1" + "0" * 400])
def test_a_record_whose_lifetime_runs_past_any_date_is_skipped_as_malformed(
    lifetime: object,
) -> None:
    """Past datetime's range (year 9999) a lifetime is no lifetime a replica writes; read,
    it raised OverflowError out of the rule on every check."""
    status = {
        "huge": {**record(99), "lifetime": lifetime},
        "last": {**record(99), "lastseen": "9999-12-31T23:59:59+00:00"},
        "c": record(1),
    }

    assert [peer.identity for peer in records(status, NOW)] == ["c"]
    assert evaluate(status, identity=ME, priority=PRIORITY, now=NOW).active
