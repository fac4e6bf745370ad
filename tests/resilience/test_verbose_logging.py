"""``craft-operator run -v``, as on-call turns it on: its debug log holds no credential.

The operator's S3 identity here is temporary (a session token, as IRSA or any STS-issued
keys give) and the sandbox has a user library, so every S3 path runs: the listing, the
presigned downloads the pod fetches. botocore's own DEBUG records dump signed requests and
STS answers; none of that may reach the log, nor any PAT or the key ring.
"""

from __future__ import annotations

import asyncio
import uuid

from craft_operator.library.s3 import make_s3_client
from tests.resilience.conftest import Launch, LeakCheck, s3_settings
from tests.resilience.harness import CRAFT, kubelet, sandbox_manifest
from tests.support.emulator import KubeEmulator
from tests.support.operator import eventually
from tests.support.pod_exec import EmulatedPodExec
from tests.support.s3 import S3Server

NAMESPACE = "verbose"
BUCKET = "onyx-files"
SECRET_KEY = "CANARY-operator-secret-key-3f9b0d"
SESSION_TOKEN = "CANARY-operator-session-token-5a7c1e"


async def test_a_verbose_run_logs_no_s3_credential_pat_or_key(
    emulator: KubeEmulator,
    pods: EmulatedPodExec,
    launch: Launch,
    s3: S3Server,
    assert_no_leaks: LeakCheck,
) -> None:
    user = str(uuid.uuid4())
    client = make_s3_client(endpoint_url=s3.url, region="us-east-1", max_attempts=1)
    client.create_bucket(Bucket=BUCKET)
    client.put_object(
        Bucket=BUCKET, Key=f"public/knowledge/{user}/user_library/notes.md", Body=b"hello"
    )
    operator = launch(
        NAMESPACE,
        CRAFT_ORPHAN_SWEEP_INTERVAL="0",
        **{
            **s3_settings(s3.url, BUCKET),
            "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
            "AWS_SESSION_TOKEN": SESSION_TOKEN,
        },
    )
    operator.run_args = ("--standalone", "-v")
    kubelet_task = asyncio.create_task(kubelet(emulator, NAMESPACE))
    operator.start()
    try:
        emulator.create(CRAFT, sandbox_manifest("alice", NAMESPACE, user))

        def synced() -> bool:
            status = emulator.get(CRAFT, NAMESPACE, "alice").get("status") or {}
            return status.get("phase") == "Ready" and any(
                c["type"] == "UserLibrarySynced" and c["status"] == "True"
                for c in status.get("conditions") or []
            )

        await eventually(synced, within=120, interval=0.5, what="alice Ready, its library synced")
        await operator.stop_cleanly()
    finally:
        kubelet_task.cancel()
        if operator.alive:
            operator.kill()
    log = "\n".join(path.read_text(errors="replace") for path in operator.logs)
    assert " DEBUG " in log, "the run logged at debug level"
    assert_no_leaks(operator, texts={"exec:argv": repr(pods.calls)})
    for canary in (SECRET_KEY, SESSION_TOKEN):
        lines = [line[:160] for line in log.splitlines() if canary in line]
        assert not lines, f"{len(lines)} log lines carry {canary}, e.g.:\n" + "\n".join(lines[:3])
