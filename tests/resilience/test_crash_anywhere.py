"""Killed anywhere, the operator loses nothing and duplicates nothing.

The operator process is ``SIGKILL``-ed and started again at random moments (seeded) while
sandboxes are being created and deleted: during start-up, mid-mint, between a child's
create and the status write, during a finalizer. Afterwards every surviving sandbox is
Ready with exactly one Secret, ConfigMap and pod and exactly one live PAT, and nothing of
the deleted ones is left: no child, no live PAT, no credential row.
"""

from __future__ import annotations

import asyncio
import random
import uuid
from pathlib import Path

from tests.resilience.conftest import Launch, LeakCheck, Scale
from tests.resilience.harness import (
    CRAFT,
    OperatorProcess,
    kubelet,
    pats_minted_per_sandbox,
    sandbox_manifest,
    until_converged,
)
from tests.support.emulator import KubeEmulator
from tests.support.leaks import secret_tokens
from tests.support.pod_exec import EmulatedPodExec

NAMESPACE = "chaos"


async def workload(
    emulator: KubeEmulator,
    rng: random.Random,
    names: list[str],
    doomed: set[str],
    spread: float,
) -> None:
    """Create every sandbox at a random moment within ``spread`` s; delete the doomed later."""
    moments = sorted(rng.uniform(0, spread) for _ in names)
    loop = asyncio.get_running_loop()
    start = loop.time()
    deletions: list[asyncio.Task[None]] = []

    async def delete_later(name: str) -> None:
        await asyncio.sleep(rng.uniform(0.2, spread / 3))
        emulator.remove(CRAFT, NAMESPACE, name)

    for name, moment in zip(names, moments, strict=True):
        await asyncio.sleep(max(0.0, start + moment - loop.time()))
        emulator.create(
            CRAFT, sandbox_manifest(name, NAMESPACE, str(uuid.UUID(int=rng.getrandbits(128))))
        )
        if name in doomed:
            deletions.append(asyncio.create_task(delete_later(name)))
    await asyncio.gather(*deletions)


async def chaos(
    operator: OperatorProcess, emulator: KubeEmulator, rng: random.Random, kills: int
) -> list[int]:
    """Kill the operator ``kills`` times at random moments; start it again each time.

    Returns how many sandboxes were not yet Ready at each kill (the work cut short).
    """
    unfinished = []
    for _ in range(kills):
        await asyncio.sleep(rng.uniform(0.3, 4.0))
        unfinished.append(
            sum(
                (s.get("status") or {}).get("phase") != "Ready"
                for s in emulator.list(CRAFT, NAMESPACE)
            )
        )
        operator.kill()
        await asyncio.sleep(rng.choice([0.0, 0.0, rng.uniform(0.1, 1.5)]))  # sometimes down a while
        operator.start()
    return unfinished


async def test_sandboxes_converge_exactly_once_while_the_operator_is_killed_at_random(
    emulator: KubeEmulator,
    pods: EmulatedPodExec,
    state: Path,
    rng: random.Random,
    scale: Scale,
    launch: Launch,
    assert_no_leaks: LeakCheck,
) -> None:
    operator = launch(NAMESPACE, CRAFT_POD_RESTART_BACKOFF="0.5")
    names = [f"user-{index:03d}" for index in range(scale.sandboxes)]
    doomed = set(rng.sample(names, k=max(2, len(names) // 10)))
    kubelet_task = asyncio.create_task(kubelet(emulator, NAMESPACE))
    operator.start()
    try:
        _, unfinished = await asyncio.gather(
            workload(emulator, rng, names, doomed, spread=scale.kills * 1.5),
            chaos(operator, emulator, rng, scale.kills),
        )
        await until_converged(
            operator,
            emulator,
            f"sqlite:///{state / 'craft-operator.db'}",
            NAMESPACE,
            [name for name in names if name not in doomed],
            within=60 + scale.sandboxes,
        )
        await operator.stop_cleanly()
    finally:
        kubelet_task.cancel()
        if operator.alive:
            operator.kill()

    assert operator.exits.count(-9) == scale.kills
    minted = pats_minted_per_sandbox(f"sqlite:///{state / 'craft-operator.db'}")
    assert len(minted) >= len(names) - len(doomed)
    assert set(minted.values()) == {1}, f"a sandbox got a second PAT: {minted}"
    report = assert_no_leaks(
        operator,
        texts={
            "exec:argv": repr(pods.calls),
            "database:file": (state / "craft-operator.db").read_bytes().decode("latin-1"),
        },
    )
    assert len(operator.logs) == scale.kills + 1
    assert operator.metrics, "no metrics page was read"
    print(
        f"{scale.kills} kills, with this many sandboxes not Ready at each: {unfinished}; "
        f"{len(secret_tokens(emulator))} PATs minted; "
        f"searched {report.searched}"
    )
