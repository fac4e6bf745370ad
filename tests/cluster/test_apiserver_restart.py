"""kube-apiserver restarted under the operator, as in a control-plane upgrade: nothing is lost
or doubled, and the operator rides it out.

Sandboxes are created in three waves; after each of the first two, while they are being
reconciled (their PATs minted, their children created, onyx-cli validated through exec),
kube-apiserver alone is stopped (``SIGTERM``) and started again with the same flags: the
operator's watches and in-flight requests are cut, its connections refused for a few
seconds. The last wave is created once the API serves again, so only watches that came back
can see it through. Every sandbox converges soon after the API is back (not once the
backoff its failed passes grew meanwhile has run out): Ready with exactly one pod, Secret and
ConfigMap and exactly one live PAT, the one in its Secret; no sandbox ever had a second PAT
minted; the same operator process still runs (it neither exited nor restarted), logged no
error or traceback, and exits cleanly on ``SIGTERM``.
"""

from __future__ import annotations

import re
import time
import uuid
from pathlib import Path

from tests.cluster.conftest import Launch
from tests.cluster.convergence import (
    SANDBOXES,
    converged,
    describe,
    log_text,
    sandbox_manifest,
    serving,
)
from tests.resilience.harness import pats_minted_per_sandbox
from tests.support.cluster import Cluster, wait_for

#: A line the operator's logging starts: its time, then its level.
LOG_LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} [A-Z]+ ")
WAVES = [[f"user-{wave}{index}" for index in range(2)] for wave in range(3)]
#: How long after a wave is created its sandboxes are still being reconciled.
MID_RECONCILE = 0.5
#: Seconds from the API serving again to every sandbox converged: the streams' backoff
#: (a few seconds after an outage this short) and a pass or two, not a reconcile backoff
#: that grew while the API was away (up to five minutes).
BACK_WITHIN = 45.0


def unexcused_errors(log: str) -> list[str]:
    """The operator's errors (each with its traceback), but its reports of refusals (403):
    a restarted kube-apiserver refuses requests for a moment, until its authorizer has
    loaded, and the launch fixture checks in the audit log that there were no others."""
    blocks: list[list[str]] = []
    for line in log.splitlines():
        if LOG_LINE.match(line):
            blocks.append([line])
        elif blocks:
            blocks[-1].append(line)  # a traceback's lines
    return [
        "\n".join(block)
        for block in blocks
        if (" ERROR " in block[0] or "Traceback (most recent call last):" in block)
        and "ApiError: 403 Forbidden" not in block[-1]
    ]


def test_sandboxes_converge_with_one_pod_and_one_pat_each_across_apiserver_restarts(
    cluster: Cluster, namespace: str, state: Path, launch: Launch
) -> None:
    database = f"sqlite:///{state / 'craft-operator.db'}"
    names = [name for wave in WAVES for name in wave]
    operator = launch()
    operator.start()
    wait_for(lambda: serving(operator), within=60, what="the operator serving")

    began = time.monotonic()
    not_ready: list[int] = []  # sandboxes not Ready at each restart
    downtime: list[float] = []
    for wave in WAVES:
        for name in wave:
            cluster.create(SANDBOXES, namespace, sandbox_manifest(name, str(uuid.uuid4())))
        if wave is WAVES[-1]:
            break
        time.sleep(MID_RECONCILE)
        not_ready.append(
            sum(
                (s.get("status") or {}).get("phase") != "Ready"
                for s in cluster.list(SANDBOXES, namespace)
            )
        )
        downtime.append(cluster.restart_apiserver())
        assert operator.alive, "the operator exited while kube-apiserver restarted:\n" + (
            operator.log_tail()
        )
    back = time.monotonic()
    wait_for(
        lambda: converged(cluster, database, namespace, names),
        within=BACK_WITHIN,
        interval=0.5,
        what=describe(f"convergence within {BACK_WITHIN:.0f} s of the API back", operator),
    )
    settled = time.monotonic()

    # Each restart cut a reconciliation short, or this test proves little.
    assert all(not_ready), f"sandboxes not Ready at each restart: {not_ready}"
    assert operator.alive, operator.log_tail()
    assert operator.exits == [], f"the operator exited: {operator.exits}"
    assert len(operator.logs) == 1, "the operator was started more than once"
    minted = pats_minted_per_sandbox(database)
    assert len(minted) == len(names), f"PATs minted for {len(minted)} sandboxes: {minted}"
    assert set(minted.values()) == {1}, f"a sandbox got a second PAT: {minted}"
    errors = unexcused_errors(log_text(operator))
    assert not errors, "the operator logged errors:\n" + "\n\n".join(errors)
    wait_for(lambda: serving(operator), within=30, what="the operator still serving")
    assert operator.terminate() == 0, operator.log_tail()

    print(
        f"{len(names)} sandboxes, {len(downtime)} kube-apiserver restarts of "
        f"{', '.join(f'{s:.1f}' for s in downtime)} s, not Ready at each: {not_ready}; "
        f"converged {settled - back:.1f} s after the API was back "
        f"({settled - began:.1f} s after the first wave)"
    )
