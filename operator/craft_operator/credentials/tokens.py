"""Onyx personal access tokens: the text format, the stored hash and the display form.

These follow Onyx's own rules (see REFERENCE.md) so that a token minted here is accepted
by the Onyx API server unchanged.
"""

from __future__ import annotations

import hashlib
import secrets
from enum import StrEnum
from urllib.parse import quote

from pydantic import SecretStr

from craft_operator.pat_format import PAT_PREFIX as PAT_PREFIX  # re-exported

#: Bytes of randomness; ``secrets.token_urlsafe`` turns 192 bytes into 256 characters.
PAT_RANDOM_BYTES = 192
#: The tenant of single-tenant deployments; its tokens carry no tenant part.
DEFAULT_TENANT = "public"
#: Scopes of a sandbox PAT: the agent may use the Craft sandbox API surface only.
CRAFT_SCOPES: tuple[str, ...] = ("craft_sandbox",)
#: How a sandbox PAT's name starts; ``namespace/name`` of its sandbox follows.
PAT_NAME_PREFIX = "craft-sandbox "


class PatType(StrEnum):
    """Kinds of PAT Onyx knows; stored by name in ``personal_access_token.pat_type``."""

    USER = "USER"
    CRAFT = "CRAFT"


def generate_token(tenant_id: str = DEFAULT_TENANT) -> SecretStr:
    """A new random PAT; tenants other than the default get Onyx's multi-tenant form."""
    random_part = secrets.token_urlsafe(PAT_RANDOM_BYTES)
    if tenant_id and tenant_id != DEFAULT_TENANT:
        return SecretStr(f"{PAT_PREFIX}{quote(tenant_id)}.{random_part}")
    return SecretStr(PAT_PREFIX + random_part)


def hash_token(token: SecretStr | str) -> str:
    """SHA-256 of the whole token text as 64 lowercase hex characters (no salt, as Onyx)."""
    text = token.get_secret_value() if isinstance(token, SecretStr) else token
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def display_form(token: SecretStr | str) -> str:
    """The masked form Onyx shows: the first 12 characters, ``****``, the last 4."""
    text = token.get_secret_value() if isinstance(token, SecretStr) else token
    if len(text) < 12:
        # Onyx shows such short strings whole; ours are never this short, so mask fully.
        return "****"
    return f"{text[:12]}****{text[-4:]}"


def pat_name(namespace: str, name: str) -> str:
    """The PAT's label in Onyx's token list, naming the sandbox it belongs to."""
    return f"{PAT_NAME_PREFIX}{namespace}/{name}"
