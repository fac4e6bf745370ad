"""Reading the operator's events back as the steps they say.

A reconcile pass posts its Normal events as one (see
:mod:`craft_operator.kube.event_batch`); tests that ask "did the operator say it created the
Secret?" look at the steps, in order, whichever event carried them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from craft_operator.kube.event_batch import steps_of


def step_reasons(events: Iterable[Mapping[str, Any]]) -> list[str]:
    """The reasons of every step the events said, in order."""
    return [reason for event in events for reason, _ in steps_of(event)]


def step_messages(events: Iterable[Mapping[str, Any]], reason: str) -> list[str]:
    """The messages of the steps with ``reason``, in order."""
    return [message for event in events for step, message in steps_of(event) if step == reason]
