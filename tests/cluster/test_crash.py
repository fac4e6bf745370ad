"""Killed at random moments on a real API server, the operator loses nothing and mints once.

``craft-operator run`` (as the ServiceAccount) is ``SIGKILL``-ed and started again, sometimes
after a while down, round after round: each round creates a few sandboxes (and deletes some
of them again) at random moments while the process starts or works, and kills it at
another: during its start-up, mid-mint, between a child's create and the status write,
during onyx-cli's validation through exec, during a finalizer. Afterwards every surviving sandbox
is Ready with exactly one pod, Secret and ConfigMap, each owned by it, and exactly one live
PAT, the one in its Secret; nothing of the deleted ones is left; and no sandbox ever had a
second PAT minted.

Every random choice comes from one seed (``RESILIENCE_SEED``, else a fresh one), printed and
named in a failure with the command that replays it. ``RESILIENCE_SCALE=full`` runs a
larger size than CI's, as in the resilience suite.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import random
import secrets
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

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
from tests.support.operator_process import OperatorProcess


@dataclasses.dataclass(frozen=True)
class Size:
    """How big a run is."""

    sandboxes: int
    kills: int


SIZES = {"ci": Size(sandboxes=15, kills=5), "full": Size(sandboxes=60, kills=15)}


@pytest.fixture
def size() -> Size:
    """``RESILIENCE_SCALE``: ``ci`` (the default) or ``full``."""
    name = os.environ.get("RESILIENCE_SCALE", "ci")
    if name not in SIZES:
        raise pytest.UsageError(f"RESILIENCE_SCALE must be one of {sorted(SIZES)}, not {name!r}")
    return SIZES[name]


@pytest.fixture
def seed() -> int:
    """``RESILIENCE_SEED`` if set, else a fresh seed; printed."""
    value = int(os.environ.get("RESILIENCE_SEED") or secrets.randbelow(2**32))
    print(f"seed: {value}")
    return value


@contextlib.contextmanager
def replayable(seed: int, request: pytest.FixtureRequest) -> Iterator[None]:
    """Name the seed, and the command that replays it, in any failure of the block."""
    try:
        yield
    except AssertionError as exc:
        scale = os.environ.get("RESILIENCE_SCALE", "ci")
        raise AssertionError(
            f"{exc}\nseed {seed}; replay with: RESILIENCE_SEED={seed} RESILIENCE_SCALE={scale} "
            f".venv/bin/pytest '{request.node.nodeid}'"
        ) from exc


@dataclasses.dataclass
class Chaos:
    """The run: rounds of sandboxes created (some deleted again) and the operator killed."""

    rng: random.Random
    cluster: Cluster
    namespace: str
    operator: OperatorProcess
    users: dict[str, str]
    #: How many sandboxes were not Ready at each kill.
    cut_short: list[int] = dataclasses.field(default_factory=list)

    def round(self, created: list[str], *, deleted: list[str]) -> None:
        """Within about two seconds: create ``created`` and delete ``deleted`` (a little after
        their creation) at random moments, and kill the operator at another; start it again
        at once or after a while.

        A round starts once the process serves, or (one in five) during its start-up:
        imports, login, the first listing. Whatever comes after the kill in the round is
        done while the operator is down or starting.
        """
        if self.rng.random() >= 0.2:
            wait_for(lambda: serving(self.operator), within=60, what="the operator serving")
        steps: list[tuple[float, str, str]] = []
        for name in created:
            moment = self.rng.uniform(0.0, 1.5)
            steps.append((moment, "create", name))
            if name in deleted:
                steps.append((moment + self.rng.uniform(0.1, 1.0), "delete", name))
        steps.append((self.rng.uniform(0.2, 2.0), "kill", ""))
        start = time.monotonic()
        for moment, action, name in sorted(steps):
            time.sleep(max(0.0, start + moment - time.monotonic()))
            if action == "create":
                manifest = sandbox_manifest(name, self.users[name])
                self.cluster.create(SANDBOXES, self.namespace, manifest)
            elif action == "delete":
                self.cluster.delete(SANDBOXES, self.namespace, name)
            else:
                self.kill_and_restart()

    def kill_and_restart(self) -> None:
        """``SIGKILL``, and start again at once or after a while."""
        self.cut_short.append(
            sum(
                (s.get("status") or {}).get("phase") != "Ready"
                for s in self.cluster.list(SANDBOXES, self.namespace)
            )
        )
        self.operator.kill()
        time.sleep(self.rng.choice([0.0, 0.0, self.rng.uniform(0.1, 1.5)]))  # down a while
        self.operator.start()


def test_sandboxes_converge_and_get_one_pat_each_while_the_operator_is_killed_at_random(
    cluster: Cluster,
    namespace: str,
    state: Path,
    launch: Launch,
    size: Size,
    seed: int,
    request: pytest.FixtureRequest,
) -> None:
    rng = random.Random(seed)
    database = f"sqlite:///{state / 'craft-operator.db'}"
    names = [f"user-{index:03d}" for index in range(size.sandboxes)]
    users = {name: str(uuid.UUID(int=rng.getrandbits(128))) for name in names}
    doomed = set(rng.sample(names, k=max(2, len(names) // 10)))
    survivors = [name for name in names if name not in doomed]
    operator = launch(CRAFT_POD_RESTART_BACKOFF="0.5")

    with replayable(seed, request):
        began = time.monotonic()
        operator.start()
        chaos = Chaos(rng, cluster, namespace, operator, users)
        for created in [names[index :: size.kills] for index in range(size.kills)]:
            chaos.round(created, deleted=[name for name in created if name in doomed])
        rounds_done = time.monotonic()
        wait_for(
            lambda: converged(cluster, database, namespace, survivors),
            within=90 + 2 * size.sandboxes,
            interval=0.5,
            what=describe("convergence", operator),
        )
        settled = time.monotonic()

        assert operator.exits.count(-9) == size.kills
        assert len(operator.logs) == size.kills + 1
        minted = pats_minted_per_sandbox(database)
        assert len(minted) >= len(survivors), f"PATs minted for {len(minted)} sandboxes"
        assert set(minted.values()) == {1}, f"a sandbox got a second PAT: {minted}"
        # The operator's own errors (kopf's retries of the API server's 429s are not).
        errors = [line for line in log_text(operator).splitlines() if " ERROR craft_" in line]
        assert not errors, "the operator logged errors:\n" + "\n".join(errors)
        wait_for(lambda: serving(operator), within=60, what="the last operator serving")
        assert operator.terminate() == 0, operator.log_tail()

    print(
        f"{size.sandboxes} sandboxes ({len(doomed)} deleted), {size.kills} kills, not Ready at "
        f"each: {chaos.cut_short}; converged {settled - rounds_done:.1f} s after the last round "
        f"({settled - began:.1f} s in all); {len(minted)} PATs minted, none twice"
    )
