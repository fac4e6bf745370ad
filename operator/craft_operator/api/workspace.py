"""``spec.workspace``: a volume of the user's own that survives sleep, wake and a new pod.

The operator makes a PVC ``<name>-workspace`` of this size and mounts it in the sandbox pod
at ``/workspace/sessions``. It lives as long as the CraftSandbox (or longer, with
``retain``). Its admission rules guard the user's data: the size may grow but never shrink,
and a workspace once set stays in the spec (removing it would delete the data silently).
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, field_validator

from craft_operator.api.base import (
    QUANTITY_RULE,
    ApiModel,
    Quantity,
    cel,
    cel_rules,
    check_class_name,
    check_quantity,
    class_name_rule,
    is_quantity_cel,
    quantity_range_rule,
)
from craft_operator.api.constants import DNS_SUBDOMAIN_MAX_LENGTH

#: Where the workspace is mounted in the sandbox container.
WORKSPACE_MOUNT = "/workspace/sessions"

SHRINK_MESSAGE = (
    "workspace.size may grow but not shrink (a volume cannot be made smaller); to start "
    "over with a smaller workspace, delete this CraftSandbox and create it again"
)
REMOVE_MESSAGE = (
    "spec.workspace cannot be removed: that would delete the user's files. To delete "
    "them, delete this CraftSandbox; to keep them, set workspace.retain: true, then "
    "delete it (a new CraftSandbox of the same name and user takes the workspace back)"
)
STORAGE_CLASS_MESSAGE = (
    "workspace.storageClassName cannot change: a volume cannot move to another storage "
    "class; delete this CraftSandbox and create it again to start over"
)

#: ``quantity()`` fails on what is no quantity; the format rule reports that instead.
_BOTH_QUANTITIES = (
    f"!{is_quantity_cel('string(self)')} || !{is_quantity_cel('string(oldSelf)')} || "
)


class Workspace(ApiModel):
    """A persistent volume mounted at ``/workspace/sessions``, kept across sleep and wake."""

    size: Quantity = Field(
        description=(
            "Size of the workspace volume, e.g. 10Gi. It may grow (the volume is expanded "
            "where its storage class allows it) but not shrink."
        ),
        json_schema_extra=cel_rules(
            QUANTITY_RULE,
            quantity_range_rule("workspace.size", minimum=1),
            cel(
                _BOTH_QUANTITIES + "!quantity(string(self)).isLessThan(quantity(string(oldSelf)))",
                SHRINK_MESSAGE,
            ),
        ),
    )
    storage_class_name: str | None = Field(
        default=None,
        description=(
            "Storage class of the workspace volume; the cluster's default if unset. "
            "It cannot change once set."
        ),
        min_length=1,
        max_length=DNS_SUBDOMAIN_MAX_LENGTH,
        json_schema_extra=cel_rules(class_name_rule("workspace.storageClassName", "StorageClass")),
    )
    retain: bool = Field(
        default=False,
        description=(
            "Keep the volume when the CraftSandbox is deleted; a new CraftSandbox of the same "
            "name and user takes it back. False: the volume is deleted with the sandbox."
        ),
    )

    @field_validator("size")
    @classmethod
    def _size(cls, value: int | str) -> Any:
        return check_quantity(value, "workspace.size", minimum=1)

    @field_validator("storage_class_name")
    @classmethod
    def _storage_class(cls, value: str | None) -> str | None:
        return check_class_name(value, "workspace.storageClassName", "StorageClass")


#: The rules on the spec's ``workspace`` field: the storage class is fixed at creation.
WORKSPACE_FIELD_RULES = cel_rules(
    cel(
        "has(self.storageClassName) == has(oldSelf.storageClassName) && "
        "(!has(self.storageClassName) || self.storageClassName == oldSelf.storageClassName)",
        STORAGE_CLASS_MESSAGE,
    )
)
#: The rule on the whole spec: a workspace once set stays.
WORKSPACE_KEPT_RULE = cel("!has(oldSelf.workspace) || has(self.workspace)", REMOVE_MESSAGE)
