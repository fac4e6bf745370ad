"""Generate the CraftSandbox CustomResourceDefinition from the pydantic models.

Pydantic emits JSON Schema; the API server wants a *structural* OpenAPI v3 schema. The
conversion inlines every ``$ref``, folds ``Optional`` (``anyOf`` with ``null``) into the plain
type, turns ``const`` into a one-value ``enum`` and drops what structural schemas forbid
(``title``, ``additionalProperties: false``, ``uniqueItems``). A description taken from a
docstring loses its hard line wraps (see :func:`unwrapped`).
"""

from __future__ import annotations

import copy
from typing import Any

import yaml

from craft_operator.api import models

_DROPPED_KEYS = {"title", "uniqueItems", "$defs", "discriminator"}


def _resolve(node: Any, defs: dict[str, Any]) -> Any:
    if isinstance(node, list):
        return [_resolve(item, defs) for item in node]
    if not isinstance(node, dict):
        return node
    if "$ref" in node:
        target = copy.deepcopy(defs[node["$ref"].rsplit("/", 1)[-1]])
        siblings = {key: value for key, value in node.items() if key != "$ref"}
        # A field's own description and rules sit beside the $ref and win over the model's.
        merged = {**target, **siblings}
        return _resolve(merged, defs)
    return {key: _resolve(value, defs) for key, value in node.items()}


def _fold_optional(node: dict[str, Any]) -> dict[str, Any]:
    variants = node.get("anyOf")
    if not variants:
        return node
    non_null = [variant for variant in variants if variant.get("type") != "null"]
    if len(non_null) == len(variants) or len(non_null) != 1:
        return node
    folded = {key: value for key, value in node.items() if key != "anyOf"}
    inner = non_null[0]
    # The outer node's description, default and rules describe the field; keep them.
    return {**inner, **folded}


def unwrapped(text: str) -> str:
    """A description as ``kubectl explain`` should show it: the lines of each paragraph
    joined (it prints line breaks as they are, so a docstring's wraps came out ragged),
    the paragraphs kept apart by a blank line."""
    paragraphs = (" ".join(paragraph.split()) for paragraph in text.split("\n\n"))
    return "\n\n".join(paragraph for paragraph in paragraphs if paragraph)


def _structural(node: Any) -> Any:
    if isinstance(node, list):
        return [_structural(item) for item in node]
    if not isinstance(node, dict):
        return node
    node = _fold_optional(node)
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in _DROPPED_KEYS:
            continue
        if key == "additionalProperties" and value is False:
            continue
        if key == "const":
            out["enum"] = [value]
            continue
        if key == "default" and value is None:
            continue
        if key == "required" and not value:
            continue
        if key == "description" and isinstance(value, str):
            out[key] = unwrapped(value)
            continue
        out[key] = _structural(value)
    if out.get("x-kubernetes-int-or-string"):
        out.pop("type", None)
    return _ordered(out)


_FIRST_KEYS = ("type", "description", "default", "enum", "required", "properties", "items")


def _ordered(node: dict[str, Any]) -> dict[str, Any]:
    """Put the keys a reader looks for first; the rest keep a stable alphabetical order."""
    first = {key: node[key] for key in _FIRST_KEYS if key in node}
    rest = {key: node[key] for key in sorted(node) if key not in first}
    return {**first, **rest}


def model_schema(model: type[models.ApiModel]) -> dict[str, Any]:
    """The structural OpenAPI schema of an API model (for a CRD)."""
    raw = model.model_json_schema(by_alias=True, mode="validation")
    defs = raw.get("$defs", {})
    return dict(_structural(_resolve(raw, defs)))


def object_schema(
    description: str | None,
    properties: dict[str, Any],
    validations: list[dict[str, Any]],
    *,
    required: tuple[str, ...] = ("spec",),
) -> dict[str, Any]:
    """The ``openAPIV3Schema`` of one of our kinds: the object's own fields around
    ``properties`` (``spec``, ``status``), with CEL rules on the whole object."""
    schema: dict[str, Any] = {
        "type": "object",
        "description": unwrapped(description) if description else description,
    }
    if required:
        schema["required"] = list(required)
    schema["properties"] = {
        "apiVersion": {
            "type": "string",
            "description": "APIVersion defines the versioned schema of this object.",
        },
        "kind": {
            "type": "string",
            "description": "Kind is the REST resource this object represents.",
        },
        "metadata": {"type": "object"},
        **properties,
    }
    schema["x-kubernetes-validations"] = validations
    return schema


def dns_label_name_rules(kind: str, max_length: int, why: str) -> list[dict[str, Any]]:
    """CEL rules that the object's name is a DNS label of at most ``max_length``: ``why``
    says what needs it that short."""
    return [
        models.cel(
            f"self.metadata.name.size() <= {max_length}",
            f"a {kind} name is at most {max_length} characters{why}",
        ),
        models.cel(
            f"self.metadata.name.matches('{models.DNS_LABEL_PATTERN}')",
            f"a {kind} name must be a DNS label: lowercase letters, digits and '-', "
            "starting and ending with a letter or digit",
        ),
    ]


def openapi_schema() -> dict[str, Any]:
    """The ``openAPIV3Schema`` of the CraftSandbox CRD."""
    spec = model_schema(models.CraftSandboxSpec)
    status = model_schema(models.CraftSandboxStatus)
    # Spec-level defaults that are whole objects (userLibrary, credentials) come from
    # default_factory; give the API server the nested defaults instead of empty objects.
    for name in ("userLibrary", "credentials"):
        spec["properties"][name]["default"] = {}
    why = ", so that the names of its pod, Secret, ConfigMap and Jobs stay valid"
    return object_schema(
        models.CraftSandbox.__doc__,
        {"spec": spec, "status": status},
        dns_label_name_rules("CraftSandbox", models.MAX_NAME_LENGTH, why),
    )


def printer_columns() -> list[dict[str, Any]]:
    """The columns ``kubectl get craftsandboxes`` shows."""
    return [
        {
            "name": "User",
            "type": "string",
            "jsonPath": ".spec.user.id",
            "description": "The Onyx user who owns the sandbox.",
        },
        {
            "name": "Phase",
            "type": "string",
            "jsonPath": ".status.phase",
            "description": "Where the sandbox is in its life.",
        },
        {
            "name": "Ready",
            "type": "string",
            "jsonPath": '.status.conditions[?(@.type=="Ready")].status',
            "description": "Whether the sandbox is ready for its agent.",
        },
        {
            "name": "Library",
            "type": "integer",
            "jsonPath": ".status.userLibrary.files",
            "description": "Files in the sandbox's user library.",
        },
        {
            "name": "Age",
            "type": "date",
            "jsonPath": ".metadata.creationTimestamp",
        },
    ]


#: On every CRD: a GitOps tool must never prune or delete one (its deletion deletes every
#: object of the kind, CraftSandboxes whose PATs then nobody revokes): Argo CD leaves them
#: when removed from git or when the Application goes, Flux when removed from git.
CRD_ANNOTATIONS = {
    "argocd.argoproj.io/sync-options": "Prune=false,Delete=false",
    "kustomize.toolkit.fluxcd.io/prune": "disabled",
}


#: How to install (or bring up to date) every CRD the operator needs, as the README's Install does.
APPLY_CRDS = "kubectl apply -k crds"


def crd_metadata(name: str) -> dict[str, Any]:
    """A CRD's metadata: its name, the operator's labels, :data:`CRD_ANNOTATIONS`."""
    return {
        "name": name,
        "labels": {
            "app.kubernetes.io/name": "craft-operator",
            "app.kubernetes.io/part-of": "craft",
        },
        "annotations": dict(CRD_ANNOTATIONS),
    }


def build_crd() -> dict[str, Any]:
    """The complete CraftSandbox CustomResourceDefinition as a dict."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": crd_metadata(f"{models.PLURAL}.{models.GROUP}"),
        "spec": {
            "group": models.GROUP,
            "scope": "Namespaced",
            "names": {
                "kind": models.KIND,
                "listKind": f"{models.KIND}List",
                "plural": models.PLURAL,
                "singular": models.SINGULAR,
                "shortNames": list(models.SHORT_NAMES),
                "categories": list(models.CATEGORIES),
            },
            "versions": [
                {
                    "name": models.VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": printer_columns(),
                    "schema": {"openAPIV3Schema": openapi_schema()},
                }
            ],
        },
    }


def crd_yaml() -> str:
    """The CRD as the YAML committed in ``crds/``."""
    header = "# Generated by `craft-operator crd` from craft_operator.api.models. Do not edit.\n"
    return header + yaml.safe_dump(build_crd(), sort_keys=False, width=100, allow_unicode=True)
