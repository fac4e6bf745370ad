"""Specification of the idle-sleep decision made from the last-activity annotation."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from craft_operator.reconciler.idle import IdleDecision, decide_idle, parse_activity

NOW = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)
HOUR = timedelta(hours=1)


def stamp(moment: datetime) -> str:
    """RFC 3339 as the backend writes it."""
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


# -- parse_activity ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "2026-03-01T11:00:00Z",
        "2026-03-01T11:00:00z",
        "2026-03-01T11:00:00+00:00",
        "2026-03-01T12:00:00+01:00",
        "2026-03-01T11:00:00.250Z",
        "  2026-03-01T11:00:00Z  ",
    ],
)
def test_rfc3339_times_with_a_zone_parse(text: str) -> None:
    moment, problem = parse_activity(text)
    assert problem is None
    assert moment is not None
    assert moment.replace(microsecond=0) == datetime(2026, 3, 1, 11, 0, 0, tzinfo=UTC)


@pytest.mark.parametrize("text", [None, "", "   "])
def test_a_missing_or_blank_annotation_is_no_time_and_no_problem(text: str | None) -> None:
    assert parse_activity(text) == (None, None)


@pytest.mark.parametrize("text", ["yesterday", "1700000000", "2026-13-01T00:00:00Z"])
def test_an_unparseable_annotation_is_a_problem_quoting_it(text: str) -> None:
    moment, problem = parse_activity(text)
    assert moment is None
    assert problem is not None
    assert "not an RFC 3339 time" in problem
    assert repr(text) in problem


def test_a_time_without_a_zone_is_a_problem() -> None:
    moment, problem = parse_activity("2026-03-01T11:00:00")
    assert moment is None
    assert problem is not None
    assert "no time zone" in problem


def test_the_problem_quotes_at_most_64_characters_of_the_annotation() -> None:
    _, problem = parse_activity("x" * 500)
    assert problem is not None
    assert "x" * 64 in problem
    assert "x" * 65 not in problem


# -- awake ---------------------------------------------------------------------------------


def test_without_an_idle_timeout_an_awake_sandbox_stays_awake() -> None:
    decision = decide_idle(
        idle_timeout=None, last_activity=stamp(NOW - 100 * HOUR), sleeping_since=None, now=NOW
    )
    assert decision == IdleDecision(asleep=False)


def test_recent_activity_keeps_it_awake_and_says_when_to_look_again() -> None:
    decision = decide_idle(
        idle_timeout=HOUR,
        last_activity=stamp(NOW - timedelta(minutes=45)),
        sleeping_since=None,
        now=NOW,
    )
    assert decision == IdleDecision(asleep=False, recheck_after=15 * 60)


def test_activity_older_than_the_timeout_puts_it_to_sleep_now() -> None:
    decision = decide_idle(
        idle_timeout=HOUR, last_activity=stamp(NOW - 2 * HOUR), sleeping_since=None, now=NOW
    )
    assert decision == IdleDecision(asleep=True, sleep_now=True)


def test_activity_exactly_at_the_timeout_puts_it_to_sleep() -> None:
    decision = decide_idle(
        idle_timeout=HOUR, last_activity=stamp(NOW - HOUR), sleeping_since=None, now=NOW
    )
    assert decision.sleep_now


def test_activity_in_another_time_zone_is_compared_correctly() -> None:
    plus_two = timezone(timedelta(hours=2))
    local = (NOW - timedelta(minutes=30)).astimezone(plus_two).isoformat()
    decision = decide_idle(idle_timeout=HOUR, last_activity=local, sleeping_since=None, now=NOW)
    assert decision == IdleDecision(asleep=False, recheck_after=30 * 60)


def test_a_missing_annotation_never_puts_it_to_sleep() -> None:
    decision = decide_idle(idle_timeout=HOUR, last_activity=None, sleeping_since=None, now=NOW)
    assert decision == IdleDecision(asleep=False)


@pytest.mark.parametrize("text", ["not a time", "2026-03-01T00:00:00"])
def test_an_unusable_annotation_never_puts_it_to_sleep_and_is_reported(text: str) -> None:
    decision = decide_idle(idle_timeout=HOUR, last_activity=text, sleeping_since=None, now=NOW)
    assert not decision.asleep
    assert not decision.sleep_now
    assert decision.problem is not None


# -- asleep --------------------------------------------------------------------------------


def test_activity_after_the_moment_it_slept_wakes_it() -> None:
    slept = NOW - HOUR
    decision = decide_idle(
        idle_timeout=HOUR,
        last_activity=stamp(slept + timedelta(seconds=1)),
        sleeping_since=slept,
        now=NOW,
    )
    assert decision == IdleDecision(asleep=False, wake_now=True)


def test_activity_in_the_second_it_fell_asleep_wakes_it() -> None:
    # Both stamps are cut to the second: a touch() in that second (or from a backend whose
    # clock is a little behind) would otherwise never wake it, touched again or not.
    slept = NOW - HOUR
    decision = decide_idle(
        idle_timeout=HOUR, last_activity=stamp(slept), sleeping_since=slept, now=NOW
    )
    assert decision == IdleDecision(asleep=False, wake_now=True)


@pytest.mark.parametrize("offset", [-timedelta(seconds=1), -5 * HOUR])
def test_activity_before_the_moment_it_slept_keeps_it_asleep(offset: timedelta) -> None:
    slept = NOW - HOUR
    decision = decide_idle(
        idle_timeout=HOUR, last_activity=stamp(slept + offset), sleeping_since=slept, now=NOW
    )
    assert decision == IdleDecision(asleep=True)


def test_a_missing_annotation_keeps_a_sleeping_sandbox_asleep() -> None:
    decision = decide_idle(idle_timeout=HOUR, last_activity=None, sleeping_since=NOW, now=NOW)
    assert decision == IdleDecision(asleep=True)


def test_an_unusable_annotation_keeps_it_asleep_and_is_reported() -> None:
    decision = decide_idle(
        idle_timeout=HOUR, last_activity="garbage", sleeping_since=NOW - HOUR, now=NOW
    )
    assert decision.asleep
    assert not decision.wake_now
    assert decision.problem is not None


def test_disabling_the_idle_timeout_wakes_a_sleeping_sandbox() -> None:
    decision = decide_idle(
        idle_timeout=None, last_activity=stamp(NOW - 5 * HOUR), sleeping_since=NOW - HOUR, now=NOW
    )
    assert decision == IdleDecision(asleep=False, wake_now=True)


def test_disabling_the_timeout_wakes_it_even_with_an_unusable_annotation() -> None:
    decision = decide_idle(
        idle_timeout=None, last_activity="garbage", sleeping_since=NOW - HOUR, now=NOW
    )
    assert decision.wake_now
    assert not decision.asleep
    assert decision.problem is not None


def test_a_sandbox_woken_by_late_news_of_old_activity_stays_awake_for_the_timeout() -> None:
    # Slept at 10:00; activity at 10:30 is only seen at 12:00 (the operator was down).
    slept = datetime(2026, 1, 1, 10, 0, tzinfo=UTC)
    activity = "2026-01-01T10:30:00Z"
    woke = decide_idle(
        idle_timeout=timedelta(hours=1),
        last_activity=activity,
        sleeping_since=slept,
        now=datetime(2026, 1, 1, 12, 0, tzinfo=UTC),
    )
    assert woke.wake_now

    after = decide_idle(
        idle_timeout=timedelta(hours=1),
        last_activity=activity,
        sleeping_since=None,
        now=datetime(2026, 1, 1, 12, 0, 5, tzinfo=UTC),
        woke_at=datetime(2026, 1, 1, 12, 0, tzinfo=UTC),
    )
    assert not after.asleep
    assert after.recheck_after == pytest.approx(3600 - 5)


# -- an activity at the end of time ----------------------------------------------------------

FAR_FUTURE = ["9999-12-31T23:00:00Z", "9999-12-31T23:59:59+00:00", "9999-12-31T23:30:00-05:00"]


@pytest.mark.parametrize("text", FAR_FUTURE)
def test_an_activity_too_far_in_the_future_is_reported_and_never_raises(text: str) -> None:
    decision = decide_idle(
        idle_timeout=timedelta(hours=2), last_activity=text, sleeping_since=None, now=NOW
    )
    assert decision == IdleDecision(
        asleep=False, problem=f"the last-activity annotation {text!r} is too far in the future"
    )


@pytest.mark.parametrize("text", FAR_FUTURE)
def test_an_activity_too_far_in_the_future_does_not_wake_a_sleeping_sandbox(text: str) -> None:
    decision = decide_idle(
        idle_timeout=timedelta(hours=2),
        last_activity=text,
        sleeping_since=NOW - HOUR,
        now=NOW,
        woke_at=NOW - 3 * HOUR,
    )
    assert decision.asleep
    assert not decision.wake_now
    assert decision.problem is not None
    assert "too far in the future" in decision.problem


def test_a_late_but_usable_activity_keeps_it_awake_until_then_and_is_said() -> None:
    # The writer's clock ahead (or a bad value): honoured, but on-call must be told, as
    # touch() never moves a stamp back.
    decision = decide_idle(
        idle_timeout=HOUR, last_activity="9999-12-31T20:00:00Z", sleeping_since=None, now=NOW
    )
    assert not decision.asleep
    assert decision.recheck_after is not None
    assert decision.problem is not None
    assert "ahead of the operator's clock" in decision.problem


def test_an_activity_a_little_ahead_of_the_operators_clock_is_no_problem() -> None:
    decision = decide_idle(
        idle_timeout=HOUR,
        last_activity=stamp(NOW + timedelta(minutes=4)),
        sleeping_since=NOW - HOUR,
        now=NOW,
    )
    assert decision == IdleDecision(asleep=False, wake_now=True)


def test_an_activity_far_ahead_wakes_a_sleeping_sandbox_and_is_said() -> None:
    decision = decide_idle(
        idle_timeout=HOUR,
        last_activity="2099-01-01T00:00:00Z",
        sleeping_since=NOW - HOUR,
        now=NOW,
    )
    assert decision.wake_now
    assert decision.problem is not None
