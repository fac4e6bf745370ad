"""The ``<name>-credentials`` Secret that hands the PAT to the sandbox pod."""

from __future__ import annotations

import base64
from typing import Any

from pydantic import SecretStr

from craft_operator.api.models import CraftSandbox
from craft_operator.builders.naming import (
    ANNOTATION_PAT_ID,
    SECRET_KEY_PAT,
    child_metadata,
    secret_name,
)


def encode_secret_value(value: SecretStr) -> str:
    """Base64 for a Secret's ``data`` field."""
    return base64.b64encode(value.get_secret_value().encode()).decode()


def build_credentials_secret(
    sandbox: CraftSandbox, *, token: SecretStr, pat_id: int
) -> dict[str, Any]:
    """The Secret with ``ONYX_PAT``: the cluster's copy of the current PAT (the pod does not
    reference it: the PAT reaches the pod by exec, see ``reconciler/steps/cli.py``)."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": child_metadata(
            sandbox, secret_name(sandbox), annotations={ANNOTATION_PAT_ID: str(pat_id)}
        ),
        "type": "Opaque",
        "data": {SECRET_KEY_PAT: encode_secret_value(token)},
    }
