"""Job mode with CRAFT_LIBRARY_JOB_ROLE_ARN: per-Job S3 credentials scoped to one library.

STS AssumeRole (moto over HTTP, which issues credentials but does not enforce policies,
and a recording stand-in that shows what is asked for) with a session policy that allows
listing the library's prefix and reading under it; the credentials go into a Secret named
after the Job and owned by it, and the Job reads that Secret instead of the shared one.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError

from craft_operator.api.models import CraftSandbox
from craft_operator.builders.library_job import build_job_secret
from craft_operator.config import Settings
from craft_operator.library.errors import S3AccessDeniedError
from craft_operator.library.location import LibraryLocation
from craft_operator.library.scoped import (
    ScopedCredentialIssuer,
    session_policy,
    session_seconds,
)
from craft_operator.reconciler.sync_jobs import desired_job
from tests.support.s3 import S3Server

ROLE = "arn:aws:iam::123456789012:role/craft-library-reader"
LOCATION = LibraryLocation(bucket="onyx-files", prefix="public/knowledge/u-1/user_library/")


class RecordingSts:
    """Answers AssumeRole like STS and remembers the request."""

    def __init__(self, error: str | None = None) -> None:
        self.calls: list[dict[str, Any]] = []
        self.error = error

    def assume_role(self, **kwargs: Any) -> dict[str, Any]:
        self.calls.append(kwargs)
        if self.error:
            raise ClientError(
                {
                    "Error": {"Code": self.error, "Message": "not allowed"},
                    "ResponseMetadata": {"HTTPStatusCode": 403},
                },
                "AssumeRole",
            )
        return {
            "Credentials": {
                "AccessKeyId": "ASIAEXAMPLE",
                "SecretAccessKey": "secret-part",
                "SessionToken": "session-part",
            }
        }


def sandbox() -> CraftSandbox:
    return CraftSandbox.model_validate(
        {
            "apiVersion": "craft.onyx.app/v1alpha1",
            "kind": "CraftSandbox",
            "metadata": {"name": "alice", "namespace": "team-a", "uid": "uid-alice"},
            "spec": {"user": {"id": "6c1f5a52-0000-4000-8000-000000000001"}},
        }
    )


def test_the_session_policy_lists_and_reads_the_library_prefix_and_nothing_else() -> None:
    policy = session_policy("onyx-files", "public/knowledge/u-1/user_library/")

    grants = {
        (tuple(statement["Action"]), tuple(statement["Resource"]))
        for statement in policy["Statement"]
    }
    assert all(statement["Effect"] == "Allow" for statement in policy["Statement"])
    assert grants == {
        (("s3:ListBucket",), ("arn:aws:s3:::onyx-files",)),
        (("s3:GetObject",), ("arn:aws:s3:::onyx-files/public/knowledge/u-1/user_library/*",)),
    }
    [listing] = [s for s in policy["Statement"] if s["Action"] == ["s3:ListBucket"]]
    assert listing["Condition"] == {
        "StringLike": {"s3:prefix": ["public/knowledge/u-1/user_library/*"]}
    }


def test_assume_role_is_asked_for_that_policy_a_session_outliving_the_job_and_a_job_name() -> None:
    sts = RecordingSts()

    ScopedCredentialIssuer(ROLE, client=sts).issue(
        LOCATION, namespace="team-a", job_name="alice-library-3", seconds=session_seconds(1800)
    )

    [call] = sts.calls
    assert call["RoleArn"] == ROLE
    assert json.loads(call["Policy"]) == session_policy(LOCATION.bucket, LOCATION.prefix)
    assert call["DurationSeconds"] == 2100
    assert call["RoleSessionName"] == "craft-team-a-alice-library-3"


def test_credentials_from_sts_go_into_a_secret_owned_by_the_job(s3_server: S3Server) -> None:
    issuer = ScopedCredentialIssuer(ROLE, endpoint_url=s3_server.url, region="us-east-1")
    credentials = issuer.issue(
        LOCATION, namespace="team-a", job_name="alice-library-1", seconds=900
    )
    job = {"metadata": {"name": "alice-library-1", "namespace": "team-a", "uid": "job-uid"}}

    secret = build_job_secret(job, credentials)

    assert secret["metadata"]["name"] == "alice-library-1-s3"
    [owner] = secret["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["uid"]) == ("Job", "alice-library-1", "job-uid")
    decoded = {key: base64.b64decode(value).decode() for key, value in secret["data"].items()}
    assert decoded["AWS_ACCESS_KEY_ID"] == credentials.access_key_id
    assert decoded["AWS_SECRET_ACCESS_KEY"] == credentials.secret_access_key.get_secret_value()
    assert decoded["AWS_SESSION_TOKEN"] == credentials.session_token.get_secret_value()
    assert decoded["AWS_ACCESS_KEY_ID"] != "testing"  # not the operator's own credentials
    assert credentials.secret_access_key.get_secret_value() not in repr(credentials)


def test_a_refused_assume_role_is_access_denied_and_names_no_credential() -> None:
    issuer = ScopedCredentialIssuer(ROLE, client=RecordingSts(error="AccessDenied"))

    with pytest.raises(S3AccessDeniedError) as raised:
        issuer.issue(LOCATION, namespace="team-a", job_name="alice-library-1", seconds=900)

    assert str(raised.value) == f"STS refused AssumeRole of {ROLE}: AccessDenied"


def test_with_a_role_the_job_reads_its_own_secret_and_needs_no_shared_one(tmp_path: Path) -> None:
    settings = Settings(state_dir=tmp_path, library_job_role_arn=ROLE)

    job = desired_job(
        sandbox(), settings, LOCATION, sequence=2, revision="r", pod_uid="p", config="c"
    )

    env = job["spec"]["template"]["spec"]["containers"][0]["env"]
    secrets = {
        item["valueFrom"]["secretKeyRef"]["name"]
        for item in env
        if "secretKeyRef" in item.get("valueFrom", {})
    }
    assert secrets == {"alice-library-2-s3"}


def test_a_subsecond_sync_timeout_gives_the_job_a_second_not_none(tmp_path: Path) -> None:
    # activeDeadlineSeconds 0: the Job controller fails every Job at once (DeadlineExceeded).
    settings = Settings(state_dir=tmp_path, library_s3_secret="s3", library_sync_timeout=0.5)

    job = desired_job(
        sandbox(), settings, LOCATION, sequence=1, revision="r", pod_uid="p", config="c"
    )

    assert job["spec"]["activeDeadlineSeconds"] == 1


def test_the_longest_sync_timeout_allowed_with_a_role_leaves_the_session_outliving_the_job(
    tmp_path: Path,
) -> None:
    settings = Settings(
        state_dir=tmp_path, library_job_role_arn=ROLE, library_sync_timeout=43200 - 300.5
    )

    job = desired_job(
        sandbox(), settings, LOCATION, sequence=1, revision="r", pod_uid="p", config="c"
    )

    deadline = job["spec"]["activeDeadlineSeconds"]
    assert deadline >= settings.library_sync_timeout
    assert session_seconds(settings.library_sync_timeout) >= deadline
