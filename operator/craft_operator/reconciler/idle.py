"""When an idle sandbox sleeps and when it wakes: a pure decision from the annotation."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

#: How far ahead of the operator's clock a last-activity stamp may be before it is said.
CLOCK_SKEW = timedelta(minutes=5)


@dataclass(frozen=True)
class IdleDecision:
    """``asleep``: the pod should not run; ``sleep_now``: it just fell asleep; and why."""

    asleep: bool
    sleep_now: bool = False
    wake_now: bool = False
    recheck_after: float | None = None
    problem: str | None = None


def parse_activity(value: str | None) -> tuple[datetime | None, str | None]:
    """The last-activity time, or a problem description if the annotation is unusable."""
    if value is None or not value.strip():
        return None, None
    text = value.strip()
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        return None, f"the last-activity annotation {text[:64]!r} is not an RFC 3339 time"
    if moment.tzinfo is None:
        return None, f"the last-activity annotation {text[:64]!r} has no time zone"
    return moment, None


def decide_idle(
    *,
    idle_timeout: timedelta | None,
    last_activity: str | None,
    sleeping_since: datetime | None,
    now: datetime,
    woke_at: datetime | None = None,
) -> IdleDecision:
    """Whether the sandbox should sleep, keep sleeping, or wake.

    A missing or unparseable annotation never puts a sandbox to sleep; while asleep, only a
    parseable activity at or after the moment it slept wakes it (or disabling the timeout).
    An activity so far ahead (year 9999) that the idle deadline after it is past the last
    moment a :class:`datetime` holds is unusable too: a problem, never an exception.
    A sandbox that woke does not fall asleep again within the timeout of waking, even when
    the activity that woke it was already old when it was seen (e.g. after an outage).
    An activity more than :data:`CLOCK_SKEW` ahead of ``now`` counts, and is a problem.
    """
    activity, problem = parse_activity(last_activity)
    deadline = None
    if activity is not None and idle_timeout is not None:
        deadline = _deadline(activity, woke_at, idle_timeout)
    if activity is not None and idle_timeout is not None and deadline is None:
        # As if unparseable: it wakes no sleeping sandbox and puts no awake one to sleep.
        text = (last_activity or "").strip()[:64]
        problem = f"the last-activity annotation {text!r} is too far in the future"
        activity = None
    if activity is not None and idle_timeout is not None and activity > now + CLOCK_SKEW:
        # Honoured (the writer may be right and this clock behind), but said: it keeps the
        # sandbox awake until then, and the client's touch() never moves it back.
        text = (last_activity or "").strip()[:64]
        problem = (
            f"the last-activity annotation {text!r} is more than {CLOCK_SKEW} ahead of the "
            "operator's clock (is its writer's clock ahead?): the sandbox stays awake until "
            "then; write the right time to let it sleep"
        )
    if sleeping_since is not None:
        if idle_timeout is None:
            return IdleDecision(asleep=False, wake_now=True, problem=problem)
        # Not later: at (a touch in the second it fell asleep, both stamps cut to seconds).
        if activity is not None and activity >= sleeping_since:
            return IdleDecision(asleep=False, wake_now=True, problem=problem)
        return IdleDecision(asleep=True, problem=problem)
    if deadline is None:  # no timeout, or no usable activity
        return IdleDecision(asleep=False, problem=problem)
    if now >= deadline:
        return IdleDecision(asleep=True, sleep_now=True)
    return IdleDecision(
        asleep=False, recheck_after=(deadline - now).total_seconds(), problem=problem
    )


def _deadline(activity: datetime, woke_at: datetime | None, timeout: timedelta) -> datetime | None:
    """When a sandbox last active at ``activity`` (and woken at ``woke_at``) falls asleep;
    ``None`` when that is past the last moment a :class:`datetime` holds (year 9999)."""
    try:
        return max(activity, woke_at or activity) + timeout
    except OverflowError:
        return None
