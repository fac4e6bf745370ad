"""One page of an S3 ``ListObjectsV2`` answer, read from its XML.

What botocore's parser makes of the same page, for the fields the sync reads: each
object's key (URL-decoded when the answer says ``EncodingType`` ``url``, as the request
asks: a key may hold characters XML 1.0 cannot carry), size, ETag (quotes kept) and last
modification; and the token of the next page. An answer that is not such a page is an
:class:`~craft_operator.library.errors.S3Error` that says so, never a crash.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import dataclass
from datetime import datetime
from urllib.parse import unquote_plus

from craft_operator.library.errors import S3Error
from craft_operator.library.plan import S3Object


@dataclass(frozen=True)
class ListingPage:
    """The objects of one page, and the continuation token of the next (``None``: last)."""

    objects: list[S3Object]
    next_token: str | None


def _local(tag: str) -> str:
    """A tag without its XML namespace (S3 puts one; some compatible stores do not)."""
    return tag.rpartition("}")[2]


def _children(element: ET.Element) -> dict[str, str]:
    return {_local(child.tag): child.text or "" for child in element}


def _modified(text: str | None) -> datetime | None:
    if not text:
        return None
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        return None


def parse_listing_page(body: bytes, *, bucket: str) -> ListingPage:
    """The page ``body`` holds; :class:`S3Error` if it is not a ``ListBucketResult``."""
    try:
        root = ET.fromstring(body)  # noqa: S314 -- see the import
    except (ET.ParseError, LookupError, ValueError) as exc:  # LookupError: an odd encoding
        raise _unreadable(f"that is not XML ({exc})", bucket) from None
    if _local(root.tag) != "ListBucketResult":
        raise _unreadable(f"of {_local(root.tag)!r}, not a ListBucketResult", bucket)
    fields = _children(root)
    encoded = fields.get("EncodingType", "").lower() == "url"
    objects = []
    for element in root:
        if _local(element.tag) != "Contents":
            continue
        item = _children(element)
        key, size = item.get("Key", ""), item.get("Size", "").strip()
        if not key or not (size.isascii() and size.isdigit()):
            raise _unreadable("with an object without a key or a size", bucket)
        objects.append(
            S3Object(
                key=unquote_plus(key) if encoded else key,
                size=int(size),
                etag=item.get("ETag", ""),
                last_modified=_modified(item.get("LastModified")),
                storage_class=item.get("StorageClass") or "STANDARD",
            )
        )
    truncated = fields.get("IsTruncated", "false").lower() == "true"
    token = fields.get("NextContinuationToken") or None
    if truncated and token is None:
        raise _unreadable("that has more pages but no token for the next", bucket)
    return ListingPage(objects, token if truncated else None)


def _unreadable(what: str, bucket: str) -> S3Error:
    return S3Error(f"S3 answered a listing of bucket {bucket!r} {what}", retryable=True)
