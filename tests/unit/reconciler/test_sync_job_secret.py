"""A sync Job's Secret of scoped S3 credentials, owned by its Job: kept when the operator
finds it made already (it restarted between the two writes). Someone else's under its name
is refused: tests/integration/test_library_jobs.py."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import SecretStr

from craft_operator.kube.client import KubeClient
from craft_operator.library.scoped import ScopedCredentials
from craft_operator.reconciler.sync_jobs import create_job_secret
from tests.support.emulator import KubeEmulator
from tests.unit.reconciler.conftest import NAMESPACE

pytestmark = pytest.mark.unit

CREDENTIALS = ScopedCredentials("ASIASCOPED", SecretStr("scoped-secret"), SecretStr("session"))


def job(name: str, uid: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": NAMESPACE, "uid": uid}}


async def test_a_jobs_secret_made_before_a_restart_is_kept(
    emulator: KubeEmulator, kube: KubeClient
) -> None:
    await create_job_secret(kube, job("alice-library-1", "job-1"), CREDENTIALS)
    made = emulator.get("v1/secrets", NAMESPACE, "alice-library-1-s3")

    await create_job_secret(kube, job("alice-library-1", "job-1"), CREDENTIALS)

    kept = emulator.get("v1/secrets", NAMESPACE, "alice-library-1-s3")
    assert kept["metadata"]["uid"] == made["metadata"]["uid"]
