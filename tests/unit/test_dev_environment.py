"""The kind dev environment's moving parts that run without a cluster.

The bucket Job's script runs against moto's S3 server with the dev settings' variable
names; ``hack/dev-up.sh`` is parsed by bash and refuses to start without a Docker engine.
"""

from __future__ import annotations

import os
import socket
import stat
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest
import yaml
from moto.server import ThreadedMotoServer

REPO = Path(__file__).resolve().parents[2]
DEV = REPO / "manifests" / "overlays" / "dev"
DEV_UP = REPO / "hack" / "dev-up.sh"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def s3_endpoint() -> Iterator[str]:
    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    # moto keeps its state per process, not per server: start from an empty S3.
    request = urllib.request.Request(f"{endpoint}/moto-api/reset", method="POST")
    urllib.request.urlopen(request, timeout=10).close()
    try:
        yield endpoint
    finally:
        server.stop()


def bucket_job_script() -> list[str]:
    with (DEV / "bucket-job.yaml").open(encoding="utf-8") as stream:
        job = yaml.safe_load(stream)
    command: list[str] = job["spec"]["template"]["spec"]["containers"][0]["command"]
    assert command[:2] == ["python", "-c"]
    return command


@pytest.mark.s3
def test_the_bucket_job_creates_the_library_bucket_and_can_run_again(s3_endpoint: str) -> None:
    bucket = "craft-user-files"
    env = {
        "PATH": os.environ.get("PATH", ""),
        "HOME": os.environ.get("HOME", "/tmp"),
        "CRAFT_S3_ENDPOINT_URL": s3_endpoint,
        "CRAFT_S3_BUCKET": bucket,
        "CRAFT_S3_REGION": "us-east-1",
        "AWS_ACCESS_KEY_ID": "craft-dev",
        "AWS_SECRET_ACCESS_KEY": "craft-dev-minio-secret",
    }
    script = bucket_job_script()
    for _ in range(2):  # a re-applied overlay or a retried pod runs it again
        result = subprocess.run(
            [sys.executable, *script[1:]],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert result.returncode == 0, result.stderr
        assert f"bucket {bucket} ready" in result.stdout
    s3 = boto3.client(
        "s3",
        endpoint_url=s3_endpoint,
        region_name="us-east-1",
        aws_access_key_id="craft-dev",
        aws_secret_access_key="craft-dev-minio-secret",
    )
    assert [b["Name"] for b in s3.list_buckets()["Buckets"]] == [bucket]


@pytest.mark.unit
def test_the_dev_up_script_is_executable_bash() -> None:
    assert DEV_UP.stat().st_mode & stat.S_IXUSR
    subprocess.run(["bash", "-n", str(DEV_UP)], check=True, timeout=30)


@pytest.mark.unit
def test_the_dev_up_script_stops_with_one_line_when_no_docker_engine_runs(tmp_path: Path) -> None:
    for tool, code in (("docker", 1), ("kind", 0), ("kubectl", 0)):
        fake = tmp_path / tool
        fake.write_text(f"#!/bin/sh\nexit {code}\n")
        fake.chmod(0o755)
    env = {"PATH": f"{tmp_path}:/usr/bin:/bin", "HOME": str(tmp_path)}
    result = subprocess.run(
        [str(DEV_UP)], env=env, capture_output=True, text=True, timeout=30, check=False
    )
    assert result.returncode == 1
    assert result.stderr == "dev-up: no Docker engine here (docker info failed)\n"
