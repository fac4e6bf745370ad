"""Presigned GET URLs for many keys of few buckets, signed here after botocore's lead.

botocore's ``generate_presigned_url`` spends most of its 0.2 to 0.5 ms per URL on what is
the same for every key of a bucket: endpoint rules, parameter validation, event hooks. A
claim's library sync presigns one URL per small file, so here botocore presigns one URL
per bucket (a probe key): its endpoint, addressing style and region are read from that
URL, and each object's URL is the probe's address with the object's key in its place,
signed with AWS Signature Version 4 query authentication (``UNSIGNED-PAYLOAD``, the one
signed header ``host``): what botocore computes for a presigned ``GetObject``, in about a
tenth of its CPU.

Each bucket is checked before it is trusted: the signature computed here for the probe,
at the probe's time and with the same credentials, must be the one botocore put in the
probe's URL. A URL of another shape (another signature version, other parameters), or a
signature that differs, keeps that bucket on botocore's own presigning; so do clients
built without the credentials at hand (``credentials=None``).
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol
from urllib.parse import quote, unquote, urlsplit

if TYPE_CHECKING:
    from mypy_boto3_s3.client import S3Client

log = logging.getLogger(__name__)

ALGORITHM = "AWS4-HMAC-SHA256"
#: The key botocore presigns to show a bucket's endpoint: plain characters, encoded as is.
PROBE_KEY = "craft-operator-probe"
_TIMESTAMP = "%Y%m%dT%H%M%SZ"
_REQUIRED = frozenset(
    {
        "X-Amz-Algorithm",
        "X-Amz-Credential",
        "X-Amz-Date",
        "X-Amz-Expires",
        "X-Amz-SignedHeaders",
        "X-Amz-Signature",
    }
)
_TOKEN_PARAM = "X-Amz-Security-Token"  # noqa: S105 (a parameter name)


class FrozenCredentials(Protocol):
    """botocore's ``ReadOnlyCredentials``: one consistent set of keys."""

    @property
    def access_key(self) -> str | None:
        """The access key id."""
        ...

    @property
    def secret_key(self) -> str | None:
        """The secret access key."""
        ...

    @property
    def token(self) -> str | None:
        """The session token of temporary credentials."""
        ...


class CredentialSource(Protocol):
    """botocore's ``Credentials`` (refreshed when they near expiry)."""

    def get_frozen_credentials(self) -> FrozenCredentials:
        """The current keys, refreshed first if they are about to expire."""
        ...


@dataclass(frozen=True)
class SigningKeys:
    """The keys a URL is signed with (``repr`` shows neither secret)."""

    access_key: str
    secret_key: str = field(repr=False)
    token: str | None = field(default=None, repr=False)


def _current_keys(source: CredentialSource) -> SigningKeys | None:
    frozen = source.get_frozen_credentials()
    if not frozen.access_key or not frozen.secret_key:
        return None
    return SigningKeys(frozen.access_key, frozen.secret_key, frozen.token)


@dataclass(frozen=True)
class BucketEndpoint:
    """Where a bucket's objects are, as botocore's presigned probe URL shows it."""

    address: str  # the URL up to the key: scheme, host, and the path before the key
    path: str  # the path part of ``address`` (the canonical URI's start)
    host: str  # the Host header as signed
    region: str


class UrlSigner:
    """Presigned GET URLs valid for ``lifetime`` seconds; see the module docstring."""

    def __init__(
        self,
        client: S3Client,
        credentials: CredentialSource | None,
        *,
        lifetime: int,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """Presign with ``client``'s endpoints; sign with ``credentials`` (the client's)."""
        self._client = client
        self._credentials = credentials
        self._lifetime = lifetime
        self._clock = clock
        self._endpoints: dict[str, BucketEndpoint | None] = {}
        self._signing_keys: dict[tuple[str, str, str], bytes] = {}

    def url(self, bucket: str, key: str) -> str:
        """A presigned URL for ``GET`` of ``key`` in ``bucket``.

        Raises what botocore raises when it cannot presign (no credentials, bad names),
        and :class:`ValueError` for an empty key (whose URL would be the bucket's listing).
        """
        return self.presign(bucket, key)[0]

    def presign(self, bucket: str, key: str) -> tuple[str, bool]:
        """:meth:`url`, and whether it was signed here (not by botocore): S3 refusing it
        may be this signer's doing, so a URL botocore signs may still pass."""
        if not key:
            raise ValueError("an S3 object key cannot be empty")
        signing = self._signing(bucket)
        if signing is None:
            return self.botocore_url(bucket, key), False  # botocore says what is missing
        endpoint, keys, stamp = signing
        return self.sign(endpoint, key, keys, stamp), True

    def may_block(self, bucket: str) -> bool:
        """Whether the next URL for ``bucket`` may wait on the network, so that it belongs
        in a thread: botocore presigns it (the bucket's first, or every one of a bucket
        left to botocore), or the credentials are due for a refresh (with web identity or
        an assumed role, a call to STS that may take seconds)."""
        if self._credentials is None or self._endpoints.get(bucket) is None:
            return True
        refresh_needed = getattr(self._credentials, "refresh_needed", None)
        if not callable(refresh_needed):
            return False
        try:
            return bool(refresh_needed())
        except Exception:  # botocore says what is wrong, in the thread
            return True

    def _signing(self, bucket: str) -> tuple[BucketEndpoint, SigningKeys, str] | None:
        """The bucket's endpoint, the keys and the moment to sign with now; ``None`` where
        the bucket is left to botocore (no credentials at hand, or not vouched for)."""
        if self._credentials is None:
            return None
        if bucket in self._endpoints:
            endpoint = self._endpoints[bucket]
        else:
            endpoint = self._probe(bucket, self._credentials)
        keys = None if endpoint is None else _current_keys(self._credentials)
        if endpoint is None or keys is None:
            return None
        return endpoint, keys, time.strftime(_TIMESTAMP, time.gmtime(self._clock()))

    def sign(self, endpoint: BucketEndpoint, key: str, credentials: SigningKeys, stamp: str) -> str:
        """The presigned URL of ``key`` at ``endpoint``, signed at ``stamp`` (UTC,
        ``YYYYMMDDTHHMMSSZ``)."""
        encoded_key = quote(key, safe="/~")
        return self._signed(
            endpoint.address + encoded_key,
            endpoint.path + encoded_key,
            [],
            endpoint,
            credentials,
            stamp,
        )

    def listing_url(self, bucket: str, params: list[tuple[str, str]]) -> str | None:
        """A presigned URL for ``ListObjectsV2`` of ``bucket`` with the request parameters
        ``params`` (``prefix``, ``continuation-token``, ``max-keys``; ``list-type=2`` and
        ``encoding-type=url`` are added, as botocore adds them), or ``None`` where this
        signer leaves the bucket to botocore (list through boto3 then)."""
        signing = self._signing(bucket)
        if signing is None:
            return None
        endpoint, keys, stamp = signing
        return self.sign_listing(endpoint, params, keys, stamp)

    def sign_listing(
        self,
        endpoint: BucketEndpoint,
        params: list[tuple[str, str]],
        credentials: SigningKeys,
        stamp: str,
    ) -> str:
        """The presigned ``ListObjectsV2`` URL of the bucket at ``endpoint``, signed at
        ``stamp``: the bucket's own address (``/bucket`` in path style, ``/`` on its host)."""
        path = endpoint.path.rstrip("/") or "/"
        address = endpoint.address[: len(endpoint.address) - len(endpoint.path)] + path
        request = [("list-type", "2"), *params, ("encoding-type", "url")]
        return self._signed(address, path, request, endpoint, credentials, stamp)

    def _signed(
        self,
        address: str,
        path: str,
        request: list[tuple[str, str]],
        endpoint: BucketEndpoint,
        credentials: SigningKeys,
        stamp: str,
    ) -> str:
        """``address`` (whose canonical URI is ``path``) with the request parameters and
        AWS Signature Version 4 query authentication for a GET."""
        scope = f"{stamp[:8]}/{endpoint.region}/s3/aws4_request"
        params = [
            *request,
            ("X-Amz-Algorithm", ALGORITHM),
            ("X-Amz-Credential", f"{credentials.access_key}/{scope}"),
            ("X-Amz-Date", stamp),
            ("X-Amz-Expires", str(self._lifetime)),
            ("X-Amz-SignedHeaders", "host"),
        ]
        if credentials.token is not None:
            params.append((_TOKEN_PARAM, credentials.token))
        encoded = [(name, quote(value, safe="-_.~")) for name, value in params]
        query = "&".join(f"{name}={value}" for name, value in encoded)
        canonical_request = "\n".join(
            (
                "GET",
                path,
                "&".join(f"{name}={value}" for name, value in sorted(encoded)),
                f"host:{endpoint.host}\n",
                "host",
                "UNSIGNED-PAYLOAD",
            )
        )
        string_to_sign = "\n".join(
            (ALGORITHM, stamp, scope, hashlib.sha256(canonical_request.encode()).hexdigest())
        )
        signing_key = self._signing_key(credentials.secret_key, stamp[:8], endpoint.region)
        signature = hmac.new(signing_key, string_to_sign.encode(), hashlib.sha256).hexdigest()
        return f"{address}?{query}&X-Amz-Signature={signature}"

    def _signing_key(self, secret: str, date: str, region: str) -> bytes:
        cached = self._signing_keys.get((secret, date, region))
        if cached is not None:
            return cached
        signing_key = f"AWS4{secret}".encode()
        for part in (date, region, "s3", "aws4_request"):
            signing_key = hmac.new(signing_key, part.encode(), hashlib.sha256).digest()
        self._signing_keys = {(secret, date, region): signing_key}  # one date at a time
        return signing_key

    def forget(self, bucket: str) -> None:
        """Forget the endpoint learnt for ``bucket``: its next URL is checked against
        botocore's again (S3 refused one of its URLs: the credentials may have changed). A
        bucket left to botocore stays so: botocore signs its URLs in any case."""
        if self._endpoints.get(bucket) is not None:
            del self._endpoints[bucket]

    def botocore_url(self, bucket: str, key: str) -> str:
        """The presigned URL of ``key`` as botocore signs it (it may wait on the network:
        endpoint rules, a credentials refresh)."""
        url: str = self._client.generate_presigned_url(
            "get_object", Params={"Bucket": bucket, "Key": key}, ExpiresIn=self._lifetime
        )
        return url

    def _probe(self, bucket: str, credentials: CredentialSource) -> BucketEndpoint | None:
        """Learn ``bucket``'s endpoint from a URL botocore presigns, and check that this
        signer computes botocore's very URL for it. The outcome is remembered, unless the
        credentials were refreshed between the two: then a later URL asks again."""
        probe = self.botocore_url(bucket, PROBE_KEY)
        keys = _current_keys(credentials)
        read = _read_probe(probe)
        if read is None:
            self._stay_on_botocore(bucket, "the shape of its URLs")
            return None
        endpoint, stamp, access_key = read
        if keys is None or access_key != keys.access_key:
            return None
        if self.sign(endpoint, PROBE_KEY, keys, stamp) != probe:
            self._stay_on_botocore(bucket, "its signatures differ from this signer's")
            return None
        self._endpoints[bucket] = endpoint
        return endpoint

    def _stay_on_botocore(self, bucket: str, why: str) -> None:
        self._endpoints[bucket] = None
        log.info("S3 URLs for bucket %s are presigned by botocore: %s", bucket, why)


def _read_probe(url: str) -> tuple[BucketEndpoint, str, str] | None:
    """The endpoint, signing time and access key of botocore's presigned probe URL; none
    if it is not a SigV4 query-signed URL of the probe key as this signer makes them."""
    address, _, query = url.partition("?")
    suffix = "/" + PROBE_KEY
    params = dict(pair.partition("=")[::2] for pair in query.split("&"))
    if (
        not address.endswith(suffix)
        or not _REQUIRED <= params.keys() <= _REQUIRED | {_TOKEN_PARAM}
        or params["X-Amz-Algorithm"] != ALGORITHM
        or params["X-Amz-SignedHeaders"] != "host"
    ):
        return None
    scope = unquote(params["X-Amz-Credential"]).split("/")
    if len(scope) != 5 or scope[3:] != ["s3", "aws4_request"]:
        return None
    address = address[: -len(PROBE_KEY)]
    parts = urlsplit(address)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"  # an IPv6 address, as botocore signs it
    if parts.port is not None and parts.port != {"http": 80, "https": 443}.get(parts.scheme):
        host = f"{host}:{parts.port}"
    endpoint = BucketEndpoint(address=address, path=parts.path, host=host, region=scope[2])
    return endpoint, params["X-Amz-Date"], scope[0]
