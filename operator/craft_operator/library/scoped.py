"""Job mode: S3 credentials that can read only one user's library, for one sync Job.

With ``CRAFT_LIBRARY_JOB_ROLE_ARN`` set, the operator calls STS ``AssumeRole`` for each
sync Job with an inline session policy that allows ``s3:ListBucket`` on the library's
prefix and ``s3:GetObject`` under it, nothing else. The session's permissions are the
intersection of the role's and the policy's, so the Job can read that user's files only,
even if the sandbox's agent reads the Job's environment through the shared volume or a
node compromise. The short-lived credentials go into a Secret named after the Job and
owned by it (deleted with it). AWS and MinIO support session policies; without them, the
shared Secret ``CRAFT_LIBRARY_S3_SECRET`` is used as before (see the README).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from pydantic import SecretStr

from craft_operator.config import MAX_SCOPED_SESSION_SECONDS, SCOPED_SESSION_SLACK_SECONDS
from craft_operator.library.errors import S3AccessDeniedError, S3Error, S3UnavailableError
from craft_operator.library.location import LibraryLocation, S3CredentialsSecret

#: STS refuses sessions shorter than 15 minutes; roles allow 1 hour unless raised.
MIN_SESSION_SECONDS = 900
MAX_SESSION_SECONDS = MAX_SCOPED_SESSION_SECONDS
SECRET_SUFFIX = "-s3"  # noqa: S105 -- a name suffix


def session_policy(bucket: str, prefix: str) -> dict[str, Any]:
    """The inline session policy: list and read ``prefix`` in ``bucket``, nothing else."""
    return {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Sid": "ListTheLibrary",
                "Effect": "Allow",
                "Action": ["s3:ListBucket"],
                "Resource": [f"arn:aws:s3:::{bucket}"],
                "Condition": {"StringLike": {"s3:prefix": [f"{prefix}*"]}},
            },
            {
                "Sid": "ReadTheLibrary",
                "Effect": "Allow",
                "Action": ["s3:GetObject"],
                "Resource": [f"arn:aws:s3:::{bucket}/{prefix}*"],
            },
        ],
    }


@dataclass(frozen=True)
class ScopedCredentials:
    """Short-lived S3 credentials; the secret parts never print."""

    access_key_id: str
    secret_access_key: SecretStr = field(repr=False)
    session_token: SecretStr = field(repr=False)
    expiration: datetime | None = None


def session_seconds(job_deadline_seconds: float) -> int:
    """A session that outlives the Job's deadline (with 5 minutes' slack), within STS's range
    (the settings refuse a CRAFT_LIBRARY_SYNC_TIMEOUT the longest would not outlive)."""
    wanted = math.ceil(job_deadline_seconds) + SCOPED_SESSION_SLACK_SECONDS
    return max(MIN_SESSION_SECONDS, min(MAX_SESSION_SECONDS, wanted))


def _session_name(namespace: str, job_name: str) -> str:
    # STS allows [\w+=,.@-]{2,64}; Kubernetes names are within that alphabet.
    return f"craft-{namespace}-{job_name}"[:64]


class ScopedCredentialIssuer:
    """Assumes ``role_arn`` with a per-library session policy (blocking: use a thread)."""

    def __init__(
        self,
        role_arn: str,
        *,
        endpoint_url: str | None = None,
        region: str | None = None,
        client: Any = None,
    ) -> None:
        self.role_arn = role_arn
        if client is None:
            import boto3  # imported on first use: the operator does not carry it until then
            from botocore.config import Config

            client = boto3.session.Session().client(
                "sts",
                endpoint_url=endpoint_url,
                config=Config(
                    region_name=region,
                    connect_timeout=5,
                    read_timeout=30,
                    retries={"total_max_attempts": 2, "mode": "standard"},
                ),
            )
        self._client = client

    def issue(
        self, location: LibraryLocation, *, namespace: str, job_name: str, seconds: int
    ) -> ScopedCredentials:
        """Credentials that read only ``location``; :class:`S3Error` subclasses on failure."""
        from botocore.exceptions import BotoCoreError, ClientError

        policy = json.dumps(session_policy(location.bucket, location.prefix), separators=(",", ":"))
        try:
            answer = self._client.assume_role(
                RoleArn=self.role_arn,
                RoleSessionName=_session_name(namespace, job_name),
                Policy=policy,
                DurationSeconds=seconds,
            )
        except ClientError as exc:
            error = exc.response.get("Error", {})
            code = str(error.get("Code", ""))
            status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
            message = f"STS refused AssumeRole of {self.role_arn}: {code or status}"
            if status >= 500 or code in ("Throttling", "ServiceUnavailable", "InternalError"):
                raise S3UnavailableError(message) from None
            raise S3AccessDeniedError(message) from None
        except BotoCoreError as exc:
            raise S3UnavailableError(
                f"STS is unreachable for AssumeRole of {self.role_arn}: {type(exc).__name__}"
            ) from None
        credentials = answer.get("Credentials") or {}
        try:
            return ScopedCredentials(
                access_key_id=str(credentials["AccessKeyId"]),
                secret_access_key=SecretStr(str(credentials["SecretAccessKey"])),
                session_token=SecretStr(str(credentials["SessionToken"])),
                expiration=credentials.get("Expiration"),
            )
        except KeyError:
            raise S3Error(
                f"STS answered AssumeRole of {self.role_arn} without credentials"
            ) from None


def job_secret_name(job_name: str) -> str:
    """``<job>-s3``: the Secret with one sync Job's scoped credentials."""
    return job_name + SECRET_SUFFIX


def job_secret_ref(job_name: str) -> S3CredentialsSecret:
    """How the sync Job's environment refers to its own credentials Secret."""
    return S3CredentialsSecret(name=job_secret_name(job_name))
