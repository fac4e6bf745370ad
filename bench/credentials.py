"""Benchmark of the credential store against a throwaway PostgreSQL (Onyx mode).

Prints p50/p99 latency and database round trips (statements, BEGINs and COMMITs counted
with SQLAlchemy events) for a reuse, a renewal mint (replaces a live PAT) and a first
mint (new sandbox). Targets: reuse in one query, a mint in at most four statements and
one commit, reuse p99 under 5 ms. On Postgres each transaction also sends its bounds
(``lock_timeout``, ``statement_timeout`` by ``SET LOCAL``, which PgBouncer's transaction
pooling passes on): transaction control like BEGIN, counted apart as ``bounds`` and in the
round trips, not as a statement; so is the liveness ping (``SELECT 1``) the pool sends
when it hands out a connection (``pool_pre_ping``, so that a failover's dropped connections
are replaced before use), and the rollback that ends a read when its connection goes back
to the pool.

    .venv/bin/python bench/credentials.py [--reuses 2000] [--mints 300] [--sqlite]
"""

from __future__ import annotations

import argparse
import logging
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Engine, event

from craft_operator.credentials import CredentialStore, KeyRing, SandboxIdentity, generate_key_entry
from craft_operator.credentials.db import (
    create_credentials_engine,
    postgres_bounds_statement,
    upgrade,
)
from craft_operator.devtools.onyx_schema import add_user, create_onyx_tables
from craft_operator.devtools.postgres import ThrowawayPostgres


@dataclass
class Counter:
    statements: int = 0
    bounds: int = 0
    pings: int = 0
    rollbacks: int = 0
    begins: int = 0
    commits: int = 0

    def attach(self, engine: Engine) -> None:
        bounds = postgres_bounds_statement()

        def on_statement(connection: Any, cursor: Any, statement: str, *_: Any) -> None:
            # SQLite's BEGIN [IMMEDIATE] is sent by the store's own "begin" hook: count it
            # as transaction control, not as a statement.
            if statement == bounds:
                self.bounds += 1
            elif not statement.startswith("BEGIN"):
                self.statements += 1

        def on_begin(connection: Any) -> None:
            # An autocommit connection "begins" only inside SQLAlchemy: nothing is sent.
            if connection.get_execution_options().get("isolation_level") != "AUTOCOMMIT":
                self.begins += 1

        def on_commit(*_: Any) -> None:
            self.commits += 1

        def on_checkout(*_: Any) -> None:
            # The pre-ping goes to the driver directly, past the cursor events.
            if engine.pool._pre_ping:
                self.pings += 1

        def on_rollback(*_: Any) -> None:
            self.rollbacks += 1

        event.listen(engine, "before_cursor_execute", on_statement)
        event.listen(engine, "rollback", on_rollback)
        event.listen(engine.pool, "checkout", on_checkout)
        event.listen(engine, "begin", on_begin)
        event.listen(engine, "commit", on_commit)

    def snapshot(self) -> tuple[int, ...]:
        return self.statements, self.bounds, self.pings, self.begins, self.commits, self.rollbacks


def measure(
    label: str, calls: int, call: Callable[[int], object], counter: Counter
) -> dict[str, float]:
    latencies: list[float] = []
    per_call: list[tuple[int, ...]] = []
    for n in range(calls):
        before = counter.snapshot()
        start = time.perf_counter()
        call(n)
        latencies.append((time.perf_counter() - start) * 1000)
        after = counter.snapshot()
        per_call.append(tuple(a - b for a, b in zip(after, before, strict=True)))  # type: ignore[arg-type]
    latencies.sort()
    p50 = statistics.median(latencies)
    p99 = latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))]
    counts = [max(column) for column in zip(*per_call, strict=True)]
    statements, bounds, pings, begins, commits, rollbacks = counts
    print(
        f"{label:<28} n={calls:<5} p50={p50:6.2f} ms  p99={p99:6.2f} ms  "
        f"statements={statements}  bounds={bounds}  ping={pings}  begin={begins}  "
        f"commit={commits}  rollback={rollbacks}  "
        f"(round trips={max(sum(call) for call in per_call)})"
    )
    return {"p50": p50, "p99": p99, "statements": statements, "commits": commits}


def run(engine: Engine, user: uuid.UUID, reuses: int, mints: int, mode: str) -> None:
    store = CredentialStore(engine, KeyRing.parse(generate_key_entry("bench")))
    counter = Counter()
    counter.attach(engine)
    live = SandboxIdentity("bench", "reuse", "uid-reuse")
    store.ensure(live, user_id=user, tenant_id="public")
    for _ in range(50):  # warm the pool and the statement caches
        store.ensure(live, user_id=user, tenant_id="public")
    print(f"--- {mode}")
    reuse = measure(
        "reuse (live PAT)",
        reuses,
        lambda _: store.ensure(live, user_id=user, tenant_id="public"),
        counter,
    )
    renewal = measure(
        "mint (replaces a live PAT)",
        mints,
        lambda _: store.ensure(live, user_id=user, tenant_id="public", force_new=True),
        counter,
    )
    first = measure(
        "mint (new sandbox)",
        mints,
        lambda n: store.ensure(
            SandboxIdentity("bench", f"new-{n}", f"uid-{n}"), user_id=user, tenant_id="public"
        ),
        counter,
    )
    worst_mint = max(renewal["statements"], first["statements"])
    one_commit = max(renewal["commits"], first["commits"]) == 1
    verdicts = {
        "reuse in 1 query": reuse["statements"] == 1,
        "mint in <= 4 statements and 1 commit": worst_mint <= 4 and one_commit,
        "reuse p99 < 5 ms": reuse["p99"] < 5,
    }
    if engine.dialect.name == "postgresql":  # the targets are set for Onyx's Postgres
        print(
            "targets: " + "; ".join(f"{k}: {'met' if v else 'MISSED'}" for k, v in verdicts.items())
        )
    store.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reuses", type=int, default=2000)
    parser.add_argument("--mints", type=int, default=300)
    parser.add_argument("--sqlite", action="store_true", help="also measure the embedded mode")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    with ThrowawayPostgres() as server:
        engine = create_credentials_engine(server.create_database("bench"))
        create_onyx_tables(engine)
        upgrade(engine)
        run(engine, add_user(engine), args.reuses, args.mints, "Postgres (Onyx mode), local server")
        engine.dispose()
    if args.sqlite:
        with tempfile.TemporaryDirectory() as directory:
            engine = create_credentials_engine(f"sqlite:///{directory}/bench.db")
            upgrade(engine)
            run(engine, uuid.uuid4(), args.reuses, args.mints, "SQLite (embedded mode)")
            engine.dispose()


if __name__ == "__main__":
    main()
