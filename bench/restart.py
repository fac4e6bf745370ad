"""Restart to steady state: how long a freshly started operator takes to visit everything.

A restarted (or newly active) replica lists every sandbox and reconciles each once; it is
back to steady state when its work queue has run a pass for every sandbox and nothing is
due. The time runs from the process's start, so it includes the interpreter's start-up,
the login and the initial lists, as a failover would.
"""

from __future__ import annotations

import time

from bench.sustained_load import BACKLOG, PASSES, scrape


def seconds_to_steady_state(
    metrics_port: int, sandboxes: int, started: float, limit: float = 900.0
) -> float:
    """Seconds from ``started`` (``time.perf_counter``) until the operator behind
    ``metrics_port`` has run ``sandboxes`` passes and has no backlog."""
    deadline = started + limit
    while time.perf_counter() < deadline:
        values = scrape(metrics_port)
        if values.get(PASSES, 0) >= sandboxes and values.get(BACKLOG, 1) == 0:
            return time.perf_counter() - started
        # A scrape visits every sandbox: polled often, it would be load of its own.
        time.sleep(0.5)
    raise TimeoutError(f"the restarted operator did not visit {sandboxes} sandboxes in {limit} s")
