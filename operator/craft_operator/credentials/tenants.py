"""Where Onyx's ``user`` and ``personal_access_token`` tables are for a tenant.

Single-tenant Onyx keeps them in the connection's default schema, for every tenant (the
module's :data:`DEFAULT_TABLES`, the declared tables themselves). Multi-tenant Onyx (Onyx
Cloud, ``CRAFT_ONYX_MULTI_TENANT``) keeps them in a Postgres schema per tenant, named by
the tenant id, and looks a PAT up there (the tenant is read from the token):
:func:`tenant_tables` gives copies of the tables in that schema. The operator's own tables
always stay in the default schema.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import NamedTuple, cast

from sqlalchemy import MetaData, Table

from craft_operator.credentials.errors import CredentialsError
from craft_operator.credentials.tables import OnyxUser, PersonalAccessToken

#: Onyx's rule for a tenant id, which names the tenant's schema in multi-tenant Onyx.
TENANT_SCHEMA_PATTERN = re.compile(r"^[a-zA-Z0-9_-]+$")
#: Postgres truncates longer identifiers, which would name another schema.
_MAX_SCHEMA_NAME = 63
#: Tenants whose tables are kept; older ones are made again when next used.
_CACHED_TENANTS = 1024


class OnyxTables(NamedTuple):
    """Onyx's tables in one schema."""

    pat: Table
    user: Table


DEFAULT_TABLES = OnyxTables(
    pat=cast(Table, PersonalAccessToken.__table__), user=cast(Table, OnyxUser.__table__)
)


def check_tenant_id(tenant_id: str) -> str:
    """The tenant id, if it can name a tenant's schema in multi-tenant Onyx; else
    :class:`CredentialsError`."""
    if not TENANT_SCHEMA_PATTERN.fullmatch(tenant_id) or len(tenant_id) > _MAX_SCHEMA_NAME:
        raise CredentialsError(
            f"tenant id {tenant_id!r} cannot name a tenant's schema in multi-tenant Onyx "
            f"(CRAFT_ONYX_MULTI_TENANT): it may hold only letters, digits, '_' and '-', at "
            f"most {_MAX_SCHEMA_NAME} of them; no PAT is minted for it"
        )
    return tenant_id


@lru_cache(maxsize=_CACHED_TENANTS)
def tenant_tables(tenant_id: str) -> OnyxTables:
    """Onyx's tables in the schema of ``tenant_id`` (checked: :func:`check_tenant_id`)."""
    metadata = MetaData()
    schema = check_tenant_id(tenant_id)
    # The user table first: the PAT table's foreign key then points into the same schema.
    user = DEFAULT_TABLES.user.to_metadata(metadata, schema=schema)
    pat = DEFAULT_TABLES.pat.to_metadata(metadata, schema=schema)
    return OnyxTables(pat=pat, user=user)
