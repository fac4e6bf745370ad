"""The database and S3 go away for a while: conditions say so, and everything comes back.

Onyx's Postgres is unavailable while half of the sandboxes are being provisioned and the
other half are syncing a new library revision; then S3 is unavailable while every sandbox
is asked to sync, twice. Each outage lasts ``outage_seconds`` (30 s at full size). During
an outage the sandboxes it touches report it in a condition (``DatabaseUnavailable``,
``S3Unavailable``); afterwards everything converges with no help, and the last revision
asked of each sandbox is the one in its pod: no sync request is lost.
"""

from __future__ import annotations

import asyncio
import random
from typing import Any

from sqlalchemy.engine import make_url

from craft_operator.credentials.db import create_credentials_engine
from craft_operator.devtools.onyx_schema import add_user
from craft_operator.library import make_s3_client
from tests.resilience.conftest import Launch, LeakCheck, Scale, s3_settings
from tests.resilience.harness import (
    CRAFT,
    kubelet,
    sandbox_manifest,
    until_converged,
)
from tests.support.emulator import KubeEmulator
from tests.support.operator import eventually
from tests.support.outage import TcpProxy
from tests.support.pod_exec import EmulatedPodExec
from tests.support.s3 import S3Server

NAMESPACE = "outages"
BUCKET = "craft-libraries"
REVISION = "craft.onyx.app/user-library-revision"


def reasons_now(emulator: KubeEmulator) -> set[str]:
    """Every condition reason any sandbox shows right now."""
    return {
        condition.get("reason", "")
        for sandbox in emulator.list(CRAFT, NAMESPACE)
        for condition in (sandbox.get("status") or {}).get("conditions") or []
    }


async def outage(
    proxy: TcpProxy, emulator: KubeEmulator, seconds: float, during: Any = None
) -> set[str]:
    """Take ``proxy`` down for ``seconds`` (running ``during`` meanwhile); reasons seen."""
    seen: set[str] = set()
    await proxy.down()
    loop = asyncio.get_running_loop()
    end = loop.time() + seconds
    if during is not None:
        await during()
    while loop.time() < end:
        seen |= reasons_now(emulator)
        await asyncio.sleep(0.2)
    await proxy.up()
    return seen


def library_current(emulator: KubeEmulator, name: str, expected: str) -> bool:
    sandbox = emulator.get(CRAFT, NAMESPACE, name)
    status = sandbox.get("status") or {}
    synced = [c for c in status.get("conditions") or [] if c.get("type") == "UserLibrarySynced"]
    return (
        (status.get("userLibrary") or {}).get("observedRevision") == expected
        and bool(synced)
        and synced[0].get("status") == "True"
    )


async def test_database_and_s3_outages_are_reported_and_recovered_from_losing_nothing(
    emulator: KubeEmulator,
    pods: EmulatedPodExec,
    rng: random.Random,
    scale: Scale,
    launch: Launch,
    assert_no_leaks: LeakCheck,
    onyx_database: str,
    s3: S3Server,
) -> None:
    names = [f"user-{index:03d}" for index in range(max(4, scale.sandboxes // 2))]
    first, second = names[: len(names) // 2], names[len(names) // 2 :]
    engine = create_credentials_engine(onyx_database)
    try:
        users = {name: str(add_user(engine)) for name in names}
    finally:
        engine.dispose()
    bucket = make_s3_client(endpoint_url=s3.url, region="us-east-1", max_attempts=1)
    bucket.create_bucket(Bucket=BUCKET)

    def upload(name: str, path: str, data: bytes) -> None:
        key = f"public/knowledge/{users[name]}/user_library/{path}"
        bucket.put_object(Bucket=BUCKET, Key=key, Body=data)

    def ask_for(name: str, revision: str) -> None:
        upload(name, f"{revision}.txt", f"{name} {revision}".encode())
        emulator.patch(CRAFT, NAMESPACE, name, {"metadata": {"annotations": {REVISION: revision}}})
        asked[name] = revision

    asked: dict[str, str] = {}
    database = make_url(onyx_database)
    db_proxy = TcpProxy(database.host or "127.0.0.1", database.port or 5432)
    s3_proxy = TcpProxy("127.0.0.1", s3.port)
    await db_proxy.up()
    await s3_proxy.up()
    proxied = database.set(host="127.0.0.1", port=db_proxy.port)
    operator = launch(
        NAMESPACE,
        CRAFT_DATABASE_URL=proxied.render_as_string(hide_password=False),
        **s3_settings(f"http://127.0.0.1:{s3_proxy.port}", BUCKET),
    )
    kubelet_task = asyncio.create_task(kubelet(emulator, NAMESPACE))
    operator.start()
    try:
        for name in first:
            upload(name, "readme.md", b"# start\n")
            emulator.create(CRAFT, sandbox_manifest(name, NAMESPACE, users[name]))
        await until_converged(operator, emulator, onyx_database, NAMESPACE, first, within=120)

        async def provision_and_sync() -> None:
            for name in second:
                emulator.create(CRAFT, sandbox_manifest(name, NAMESPACE, users[name]))
            for name in first:
                ask_for(name, "rev-1")

        database_reasons = await outage(
            db_proxy, emulator, scale.outage_seconds, provision_and_sync
        )

        async def sync_twice() -> None:
            for name in names:
                ask_for(name, "rev-2")
            await asyncio.sleep(scale.outage_seconds / 2)
            for name in rng.sample(names, k=len(names) // 2):
                ask_for(name, "rev-3")

        s3_reasons = await outage(s3_proxy, emulator, scale.outage_seconds, sync_twice)

        within = 2 * scale.outage_seconds + 90
        await until_converged(operator, emulator, onyx_database, NAMESPACE, names, within=within)
        for name in names:
            await eventually(
                lambda name=name: library_current(emulator, name, asked[name]),  # type: ignore[misc]
                within=within,
                interval=0.2,
                what=f"{name}: revision {asked[name]} synced",
            )
        assert operator.alive, "the operator process died"
        await operator.stop_cleanly()
    finally:
        kubelet_task.cancel()
        if operator.alive:
            operator.kill()
        await db_proxy.close()
        await s3_proxy.close()

    assert "DatabaseUnavailable" in database_reasons, database_reasons
    assert "S3Unavailable" in s3_reasons, s3_reasons
    for name in names:
        library = pods.local.workspace(NAMESPACE, name) / "user_library"
        assert (library / f"{asked[name]}.txt").read_text() == f"{name} {asked[name]}"
    assert operator.generation == 1, "the operator had to be restarted"
    assert_no_leaks(operator, texts={"exec:argv": repr(pods.calls)})
    print(
        f"database outage: {scale.outage_seconds:.0f} s, reasons seen {sorted(database_reasons)}; "
        f"S3 outage: {scale.outage_seconds:.0f} s, reasons seen {sorted(s3_reasons)}"
    )
