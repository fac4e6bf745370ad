"""``doctor``'s S3 check: the default bucket answers a HEAD with the operator's credentials."""

from __future__ import annotations

from botocore.exceptions import ClientError

from craft_operator.config import Settings
from craft_operator.doctor.kubernetes import KUBE_TIMEOUT_S
from craft_operator.doctor.results import CheckResult, fail, ok, warn
from craft_operator.library.errors import S3BucketNotFoundError, S3Error
from craft_operator.library.s3 import classify_s3_error, make_s3_client


def _head_bucket_error(exc: Exception, bucket: str) -> S3Error:
    # HEAD answers carry no error body: a missing bucket is a bare 404, not NoSuchBucket.
    if isinstance(exc, ClientError):
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        if status == 404:
            return S3BucketNotFoundError(f"S3 bucket {bucket!r} does not exist")
    return classify_s3_error(exc, bucket=bucket)


def check_s3(settings: Settings) -> CheckResult:
    """HEAD the default bucket (CRAFT_S3_BUCKET) with the operator's S3 credentials."""
    name = "S3"
    bucket = settings.s3_bucket
    if not bucket:
        return warn(
            name,
            "no CRAFT_S3_BUCKET: user libraries need spec.userLibrary.bucket",
            "set CRAFT_S3_BUCKET to the bucket of Onyx's user files",
        )
    where = settings.s3_endpoint_url or "AWS"
    client = make_s3_client(
        endpoint_url=settings.s3_endpoint_url,
        region=settings.s3_region,
        max_attempts=1,
        read_timeout=KUBE_TIMEOUT_S,
    )
    try:
        client.head_bucket(Bucket=bucket)
    except Exception as exc:  # botocore raises many types; classify_s3_error sorts them
        error = _head_bucket_error(exc, bucket)
        fixes = {
            "S3BucketNotFound": "create the bucket, or correct CRAFT_S3_BUCKET",
            "S3AccessDenied": "give the operator's S3 identity (AWS_* variables or the pod's "
            "cloud role) s3:ListBucket and s3:GetObject on the bucket",
            "S3Unavailable": "check CRAFT_S3_ENDPOINT_URL, CRAFT_S3_REGION and the network "
            "path to S3",
        }
        return fail(
            name, f"{error.message} ({where})", fixes.get(error.reason, fixes["S3Unavailable"])
        )
    finally:
        client.close()
    return ok(name, f"bucket {bucket!r} is reachable ({where})")
