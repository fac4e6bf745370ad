"""The CraftSandbox objects the client sends and reads: pure functions, no I/O."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from pydantic import ValidationError

from craft_operator.api.models import (
    API_VERSION,
    GROUP,
    KIND,
    PLURAL,
    VERSION,
    CraftSandbox,
    CraftSandboxSpec,
    Source,
    UserRef,
    Workspace,
)
from craft_operator.api.parse import InvalidSandboxError, describe_validation_error, parse_sandbox
from craft_operator.client.errors import InvalidSpecError


def apply_body(
    namespace: str,
    name: str,
    user_id: str,
    tenant_id: str,
    sources: Iterable[Source | str] | None,
    email: str | None,
    labels: Mapping[str, str] | None,
    spec: Mapping[str, Any],
    workspace: Workspace | Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The apply configuration: exactly the fields the backend owns, validated locally.

    ``sources`` ``None`` leaves them out (an empty list is sent: the caller says "none").
    """
    if "suspend" in spec:
        raise InvalidSpecError("suspend is not set by ensure(): use sleep() and wake()")
    if workspace is not None:
        spec = {**spec, "workspace": workspace}
    user = {"id": user_id, "tenant_id": tenant_id} | ({"email": email} if email else {})
    try:
        if sources is not None:
            # Applying a field claims it: sent only when given, so that an ensure() without
            # sources does not take over those another manager set (it gives up any that
            # this manager applied before: the caller passes its whole spec every time).
            given = [Source(name=s) if isinstance(s, str) else s for s in sources]
            spec = {**spec, "sources": given}
        model = CraftSandboxSpec(user=UserRef(**user), **spec)
    except (ValidationError, TypeError) as exc:
        detail = describe_validation_error(exc) if isinstance(exc, ValidationError) else str(exc)
        raise InvalidSpecError(f'CraftSandbox "{name}": {detail}') from None
    metadata: dict[str, Any] = {"name": name, "namespace": namespace}
    if labels:
        metadata["labels"] = dict(labels)
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": metadata,
        # What the caller left unset, or set to None, is not the backend's: never sent as null.
        "spec": model.model_dump(by_alias=True, mode="json", exclude_unset=True, exclude_none=True),
    }


def to_model(obj: Mapping[str, Any]) -> CraftSandbox:
    """The typed sandbox; the status parsed leniently, as the operator reads it."""
    try:
        return parse_sandbox(obj)
    except InvalidSandboxError as exc:
        raise InvalidSpecError(f"the stored CraftSandbox is not valid: {exc}") from None


def sandbox_path(namespace: str, name: str | None = None) -> str:
    """The API path of the namespace's CraftSandboxes, or of one of them."""
    path = f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{PLURAL}"
    return f"{path}/{name}" if name else path


def to_second(moment: datetime) -> datetime:
    """``moment`` in UTC to the second, as annotations and the status hold times."""
    return moment.astimezone(UTC).replace(microsecond=0)


def format_time(moment: datetime) -> str:
    """RFC 3339 in UTC, as the operator reads the last-activity annotation."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_activity(value: str | None) -> datetime | None:
    """The stored last-activity time; ``None`` if absent or unreadable (then overwritten)."""
    if not value:
        return None
    try:
        moment = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
    except ValueError:
        return None
    return moment if moment.tzinfo is not None else None
