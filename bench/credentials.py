"""Benchmark of the credential store against a throwaway PostgreSQL (Onyx mode).

Prints p50/p99 latency and database round trips (statements, BEGINs and COMMITs counted
with SQLAlchemy events) for a reuse, a renewal mint (replaces a live PAT) and a first
mint (new sandbox). Targets: reuse in one query, a mint in at most four statements and
one commit, reuse p99 under 5 ms.

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
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Engine, event

from craft_operator.credentials import CredentialStore, KeyRing, SandboxIdentity, generate_key_entry
from craft_operator.credentials.db import create_credentials_engine, upgrade
from craft_operator.devtools.onyx_schema import add_user, create_onyx_tables
from craft_operator.devtools.postgres import ThrowawayPostgres


@dataclass
class Counter:
    statements: int = 0
    begins: int = 0
    commits: int = 0
    samples: list[tuple[int, int, int]] = field(default_factory=list)

    def attach(self, engine: Engine) -> None:
        def on_statement(connection: Any, cursor: Any, statement: str, *_: Any) -> None:
            # SQLite's BEGIN [IMMEDIATE] is sent by the store's own "begin" hook: count it
            # as transaction control, not as a statement.
            if not statement.startswith("BEGIN"):
                self.statements += 1

        def on_begin(connection: Any) -> None:
            # An autocommit connection "begins" only inside SQLAlchemy: nothing is sent.
            if connection.get_execution_options().get("isolation_level") != "AUTOCOMMIT":
                self.begins += 1

        def on_commit(*_: Any) -> None:
            self.commits += 1

        event.listen(engine, "before_cursor_execute", on_statement)
        event.listen(engine, "begin", on_begin)
        event.listen(engine, "commit", on_commit)

    def snapshot(self) -> tuple[int, int, int]:
        return self.statements, self.begins, self.commits


def measure(
    label: str, calls: int, call: Callable[[int], object], counter: Counter
) -> dict[str, float]:
    latencies: list[float] = []
    per_call: list[tuple[int, int, int]] = []
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
    statements = max(s for s, _, _ in per_call)
    begins = max(b for _, b, _ in per_call)
    commits = max(c for _, _, c in per_call)
    print(
        f"{label:<28} n={calls:<5} p50={p50:6.2f} ms  p99={p99:6.2f} ms  "
        f"statements={statements}  begin={begins}  commit={commits}  "
        f"(round trips={statements + begins + commits})"
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
