"""Presigned URLs signed here are botocore's own, byte for byte; where they could not be,
botocore presigns them."""

from __future__ import annotations

import datetime
import logging
from dataclasses import dataclass
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.credentials import ReadOnlyCredentials

from craft_operator.library.s3 import make_s3_client
from craft_operator.library.s3_presign import PROBE_KEY, UrlSigner

SIGNED_AT = datetime.datetime(2026, 11, 24, 3, 41, 7, tzinfo=datetime.UTC)
CANARY_SECRET = "canary-secret-key-5d1e"

KEYS = [
    "a.txt",
    "public/knowledge/3f2b8c1e/user_library/notes.md",
    "dir/héllo wörld+100%.txt",
    "~tilde/*star?query#hash[br]&amp=eq;semi@at!bang$dollar'q(paren)",
    " leading and trailing space ",
    "//double//slashes/",
    "./dot/../segments/.",
    "percent%20literal%2F",
    "日本語/ファイル.pdf",
    "emoji 😀.png",
    "tab\tand newline\n",
]


@pytest.fixture(autouse=True)
def fixed_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", CANARY_SECRET)
    monkeypatch.delenv("AWS_SESSION_TOKEN", raising=False)
    monkeypatch.delenv("AWS_PROFILE", raising=False)


@pytest.fixture(autouse=True)
def frozen_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """botocore signs at SIGNED_AT, as the signer's clock says too."""
    monkeypatch.setattr("botocore.auth.get_current_datetime", lambda: SIGNED_AT)


def signer_for(client: Any, credentials: Any, *, lifetime: int = 300) -> UrlSigner:
    return UrlSigner(client, credentials, lifetime=lifetime, clock=SIGNED_AT.timestamp)


def botocore_url(client: Any, bucket: str, key: str, lifetime: int = 300) -> str:
    url: str = client.generate_presigned_url(
        "get_object", Params={"Bucket": bucket, "Key": key}, ExpiresIn=lifetime
    )
    return url


@dataclass
class Counting:
    """A client whose presign calls are counted."""

    client: Any
    presigned: int = 0

    def generate_presigned_url(self, *args: Any, **kwargs: Any) -> str:
        self.presigned += 1
        url: str = self.client.generate_presigned_url(*args, **kwargs)
        return url


def counted_signer(
    where: dict[str, str], token: str | None, monkeypatch: pytest.MonkeyPatch
) -> tuple[Counting, UrlSigner]:
    """A client at ``where`` whose presigns are counted, and a signer over it (with a
    session token, if ``token``)."""
    if token:
        monkeypatch.setenv("AWS_SESSION_TOKEN", token)
    session = boto3.session.Session()
    counting = Counting(make_s3_client(**where, session=session))
    return counting, signer_for(counting, session.get_credentials())


ENDPOINTS = [
    pytest.param({"endpoint_url": "http://127.0.0.1:9000", "region": "us-east-1"}, id="path"),
    pytest.param({"endpoint_url": "http://[::1]:9000", "region": "us-east-1"}, id="ipv6"),
    pytest.param({"endpoint_url": "https://minio.example:443", "region": "eu-central-1"}, id="tls"),
    pytest.param({"region": "eu-west-1"}, id="aws-virtual-host"),
]


@pytest.mark.parametrize("where", ENDPOINTS)
@pytest.mark.parametrize("token", [None, "canary-session-token/with+plus=="])
def test_every_url_is_botocores_own(
    where: dict[str, str], token: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    counting, signer = counted_signer(where, token, monkeypatch)

    for key in KEYS:
        url = signer.url("craft-user-files", key)
        assert url == botocore_url(counting.client, "craft-user-files", key)
    assert counting.presigned == 1  # the probe: every URL was signed here


def test_botocore_presigns_once_per_bucket() -> None:
    session = boto3.session.Session()
    counting = Counting(make_s3_client(endpoint_url="http://127.0.0.1:9000", session=session))
    signer = signer_for(counting, session.get_credentials())

    for key in KEYS:
        signer.url("one", key)
        signer.url("two", key)

    assert counting.presigned == 2


def test_a_forgotten_bucket_is_checked_against_botocore_again() -> None:
    """S3 refused one of the bucket's URLs: what was learnt of it is learnt again."""
    session = boto3.session.Session()
    counting = Counting(make_s3_client(endpoint_url="http://127.0.0.1:9000", session=session))
    signer = signer_for(counting, session.get_credentials())

    signer.url("files", "a.txt")
    signer.forget("files")
    url = signer.url("files", "b.txt")

    assert counting.presigned == 2
    assert url == botocore_url(counting.client, "files", "b.txt")


def test_an_empty_key_is_refused_for_its_url_would_list_the_bucket() -> None:
    session = boto3.session.Session()
    counting = Counting(make_s3_client(endpoint_url="http://127.0.0.1:9000", session=session))
    signer = signer_for(counting, session.get_credentials())

    with pytest.raises(ValueError, match="cannot be empty"):
        signer.url("files", "")
    assert counting.presigned == 0


def test_a_url_of_another_shape_leaves_the_bucket_to_botocore(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A signature version this signer does not make (here SigV2) is botocore's to make."""
    session = boto3.session.Session()
    client = session.client(
        "s3", endpoint_url="http://127.0.0.1:9000", config=Config(signature_version="s3")
    )
    counting = Counting(client)
    signer = signer_for(counting, session.get_credentials())

    with caplog.at_level(logging.INFO, logger="craft_operator.library.s3_presign"):
        urls = [signer.url("files", key) for key in KEYS[:3]]

    assert urls == [botocore_url(client, "files", key) for key in KEYS[:3]]
    assert counting.presigned == 1 + 3  # the probe, then botocore for every URL
    assert "presigned by botocore: the shape of its URLs" in caplog.text

    signer.forget("files")  # S3 refused one: nothing learnt to forget, botocore signs on
    signer.url("files", "a.txt")
    assert counting.presigned == 1 + 3 + 1


@dataclass
class Keys:
    """Credentials that are not the client's (a secret of its own)."""

    access_key: str = "AKIDEXAMPLE"
    secret_key: str = "another-secret"
    token: str | None = None

    def get_frozen_credentials(self) -> ReadOnlyCredentials:
        return ReadOnlyCredentials(self.access_key, self.secret_key, self.token)


def test_a_signature_unlike_botocores_leaves_the_bucket_to_botocore(
    caplog: pytest.LogCaptureFixture,
) -> None:
    client = make_s3_client(endpoint_url="http://127.0.0.1:9000", region="us-east-1")
    signer = signer_for(client, Keys())

    with caplog.at_level(logging.INFO, logger="craft_operator.library.s3_presign"):
        url = signer.url("files", "a.txt")

    assert url == botocore_url(client, "files", "a.txt")
    assert "its signatures differ" in caplog.text
    assert CANARY_SECRET not in caplog.text
    assert "another-secret" not in caplog.text


class Refreshed:
    """Credentials refreshed between botocore's probe and the signer's look at them: the
    first look sees a new access key, the later ones the client's."""

    def __init__(self, session: boto3.session.Session) -> None:
        self._source = session.get_credentials()
        self.looks = 0

    def get_frozen_credentials(self) -> ReadOnlyCredentials:
        self.looks += 1
        if self.looks == 1:
            return ReadOnlyCredentials("AKIDREFRESHED", "new-secret", None)
        frozen: ReadOnlyCredentials = self._source.get_frozen_credentials()  # type: ignore[union-attr]
        return frozen


def test_credentials_refreshed_during_the_probe_only_delay_the_decision() -> None:
    session = boto3.session.Session()
    counting = Counting(make_s3_client(endpoint_url="http://127.0.0.1:9000", session=session))
    signer = signer_for(counting, Refreshed(session))

    first = signer.url("files", "a.txt")  # probe + botocore: undecided
    second = signer.url("files", "b.txt")  # probe again, now checked: signed here
    third = signer.url("files", "c.txt")

    assert first == botocore_url(counting.client, "files", "a.txt")
    assert second == botocore_url(counting.client, "files", "b.txt")
    assert third == botocore_url(counting.client, "files", "c.txt")
    assert counting.presigned == 3  # two probes and one URL; the rest signed here


@pytest.fixture
def no_env_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


@pytest.mark.usefixtures("no_env_credentials")
def test_without_credentials_botocore_says_so() -> None:
    from botocore.exceptions import NoCredentialsError

    session = boto3.session.Session()
    client = make_s3_client(endpoint_url="http://127.0.0.1:9000", session=session)
    signer = signer_for(client, session.get_credentials())

    with pytest.raises(NoCredentialsError):
        signer.url("files", "a.txt")


def test_the_probe_key_needs_no_encoding() -> None:
    from urllib.parse import quote

    assert quote(PROBE_KEY, safe="") == PROBE_KEY


def test_a_url_signed_on_a_later_day_uses_that_days_key(monkeypatch: pytest.MonkeyPatch) -> None:
    session = boto3.session.Session()
    counting = Counting(make_s3_client(endpoint_url="http://127.0.0.1:9000", session=session))
    now = [SIGNED_AT]
    monkeypatch.setattr("botocore.auth.get_current_datetime", lambda: now[0])
    signer = UrlSigner(
        counting, session.get_credentials(), lifetime=300, clock=lambda: now[0].timestamp()
    )

    urls = []
    for days in (0, 1, 0):
        now[0] = SIGNED_AT + datetime.timedelta(days=days, seconds=1)
        urls.append((signer.url("files", "a.txt"), botocore_url(counting.client, "files", "a.txt")))

    assert all(ours == botocore for ours, botocore in urls)
    assert counting.presigned == 1


def botocore_listing_url(client: Any, bucket: str, params: dict[str, Any]) -> str:
    url: str = client.generate_presigned_url(
        "list_objects_v2", Params={"Bucket": bucket, **params}, ExpiresIn=300
    )
    return url


@pytest.mark.parametrize("where", ENDPOINTS)
@pytest.mark.parametrize("token", [None, "canary-session-token/with+plus=="])
@pytest.mark.parametrize(
    "prefix", ["public/knowledge/3f2b8c1e/user_library/", "dir/héllo wörld+100%/"]
)
def test_a_listing_url_is_botocores_own(
    where: dict[str, str], token: str | None, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    counting, signer = counted_signer(where, token, monkeypatch)

    first = signer.listing_url("craft-user-files", [("prefix", prefix)])
    later = signer.listing_url(
        "craft-user-files",
        [("prefix", prefix), ("continuation-token", "1/ab+cd=="), ("max-keys", "100")],
    )

    assert first == botocore_listing_url(counting.client, "craft-user-files", {"Prefix": prefix})
    assert later == botocore_listing_url(
        counting.client,
        "craft-user-files",
        {"Prefix": prefix, "ContinuationToken": "1/ab+cd==", "MaxKeys": 100},
    )
    assert counting.presigned == 1  # the probe of the bucket: both were signed here


def test_a_bucket_left_to_botocore_is_listed_through_boto3() -> None:
    session = boto3.session.Session()
    client = make_s3_client(endpoint_url="http://127.0.0.1:9000", session=session)
    assert signer_for(client, None).listing_url("craft-user-files", [("prefix", "p/")]) is None


@pytest.mark.parametrize("region", ["af-south-1", "eu-west-1", "ap-east-1"])
@pytest.mark.parametrize("bucket", ["my-library", "my.library"])
def test_on_aws_every_url_names_the_buckets_region(region: str, bucket: str) -> None:
    # Regions opened since March 2019 refuse the legacy global host (400
    # IllegalLocationConstraintException), and any Region's bucket redirects there for
    # its first day: URLs must go where boto3's own requests go.
    session = boto3.session.Session()
    signer = signer_for(make_s3_client(region=region, session=session), session.get_credentials())

    url, _ = signer.presign(bucket, "user_library/notes.md")
    listing = signer.listing_url(bucket, [("prefix", "user_library/")])

    host = f"s3.{region}.amazonaws.com"
    assert url.split("/")[2] in {host, f"{bucket}.{host}"}
    assert listing is not None
    assert listing.split("/")[2] == url.split("/")[2]
    if "." in bucket:  # a virtual host with dots would not match the certificate
        assert url.startswith(f"https://{host}/{bucket}/")
