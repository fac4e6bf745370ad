"""A flaky API server: a tenth of requests fail and watches drop, yet everything converges.

Every operator request for a resource has a 10% chance to be answered with 409, 429 (with
``Retry-After``), 500, or a dropped connection, before or after the write was applied, and
every open watch is cut every 1-4 seconds. The credentials live in Onyx's Postgres. The
same guarantees as after crashes must hold: every sandbox Ready, one of each child, one
live PAT each, nothing left of deleted sandboxes, and the operator process never died.
"""

from __future__ import annotations

import asyncio
import random

from craft_operator.credentials.db import create_credentials_engine
from craft_operator.devtools.onyx_schema import add_user
from tests.resilience.conftest import Launch, LeakCheck, Scale
from tests.resilience.harness import (
    CRAFT,
    kubelet,
    pats_minted_per_sandbox,
    sandbox_manifest,
    until_converged,
)
from tests.support.emulator import KubeEmulator
from tests.support.faults import WRITE_FAULTS, ApiFaults, cut_watches_periodically
from tests.support.leaks import secret_tokens
from tests.support.operator import eventually
from tests.support.pod_exec import EmulatedPodExec

NAMESPACE = "flaky"


async def test_sandboxes_converge_exactly_once_on_a_flaky_api_server(
    emulator: KubeEmulator,
    pods: EmulatedPodExec,
    rng: random.Random,
    scale: Scale,
    launch: Launch,
    assert_no_leaks: LeakCheck,
    onyx_database: str,
) -> None:
    names = [f"user-{index:03d}" for index in range(scale.sandboxes)]
    doomed = set(rng.sample(names, k=max(2, len(names) // 10)))
    engine = create_credentials_engine(onyx_database)
    try:
        users = {name: str(add_user(engine)) for name in names}
    finally:
        engine.dispose()
    operator = launch(NAMESPACE, CRAFT_DATABASE_URL=onyx_database, CRAFT_POD_RESTART_BACKOFF="0.5")
    faults = ApiFaults(emulator, random.Random(rng.getrandbits(64)), rate=0.1)
    emulator.before_request.append(faults)
    cuts: list[int] = []
    background = [
        asyncio.create_task(kubelet(emulator, NAMESPACE)),
        asyncio.create_task(
            cut_watches_periodically(emulator, random.Random(rng.getrandbits(64)), cuts=cuts)
        ),
    ]
    operator.start()
    try:
        for name in names:
            emulator.create(CRAFT, sandbox_manifest(name, NAMESPACE, users[name]))
            await asyncio.sleep(rng.uniform(0, 0.2))
        for name in sorted(doomed):
            await asyncio.sleep(rng.uniform(0, 0.3))
            emulator.remove(CRAFT, NAMESPACE, name)
        await until_converged(
            operator,
            emulator,
            onyx_database,
            NAMESPACE,
            [name for name in names if name not in doomed],
            within=90 + scale.sandboxes,
        )
        # A fast convergence may beat the third cut of the watches: let them come, and
        # check that the operator still holds the converged state through them.
        await eventually(lambda: len(cuts) >= 3, within=30, what="three cuts of the watches")
        await until_converged(
            operator,
            emulator,
            onyx_database,
            NAMESPACE,
            [name for name in names if name not in doomed],
            within=90 + scale.sandboxes,
        )
        assert operator.alive, "the operator process died"
        operator.scrape_metrics()
        faults.enabled = False
        await operator.stop_cleanly()
    finally:
        for task in background:
            task.cancel()
        if operator.alive:
            operator.kill()

    assert operator.generation == 1, "the operator had to be restarted"
    assert set(faults.injected) == set(WRITE_FAULTS), (
        f"not every fault was tried: {faults.injected}"
    )
    assert len(cuts) >= 3
    assert sum(cuts) > 0, "no watch was open when the streams were cut"
    minted = pats_minted_per_sandbox(onyx_database)
    assert len(minted) >= len(names) - len(doomed)
    assert set(minted.values()) == {1}, f"a sandbox got a second PAT: {minted}"
    assert_no_leaks(operator, texts={"exec:argv": repr(pods.calls)})
    print(
        f"faults injected: {dict(faults.injected)}; watch cuts: {len(cuts)} "
        f"({sum(cuts)} streams); {len(secret_tokens(emulator))} PATs minted"
    )
