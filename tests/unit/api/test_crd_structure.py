"""The generated CRD is one the API server accepts, and one people can read and operate.

The structural-schema rules are those of the Kubernetes docs ("Specifying a structural
schema"); the bounds keep every CEL rule inside the API server's cost budget.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import kubernetes_validate
import pytest
from kubernetes_validate.utils import all_versions

from tests.support.crd_validation import _program

pytestmark = pytest.mark.unit

JUNCTORS = ("anyOf", "oneOf", "allOf", "not")
SCHEMA_ONLY_IN_JUNCTORS = ("type", "nullable", "description", "default")

Node = tuple[str, dict[str, Any], bool]


def walk(node: dict[str, Any], path: str = "", in_junctor: bool = False) -> Iterator[Node]:
    """Every schema node below ``node`` as (path, node, whether inside anyOf/oneOf/...)."""
    yield path, node, in_junctor
    for name, child in node.get("properties", {}).items():
        yield from walk(child, f"{path}.{name}", in_junctor)
    if isinstance(node.get("items"), dict):
        yield from walk(node["items"], f"{path}[]", in_junctor)
    if isinstance(node.get("additionalProperties"), dict):
        yield from walk(node["additionalProperties"], f"{path}{{}}", in_junctor)
    for junctor in JUNCTORS:
        children = node.get(junctor)
        if isinstance(children, dict):
            children = [children]
        for index, child in enumerate(children or []):
            yield from walk(child, f"{path}<{junctor}{index}>", True)


def fields(node: dict[str, Any], path: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every named property below ``node`` (list items and map values are not fields)."""
    for name, child in node.get("properties", {}).items():
        yield f"{path}.{name}", child
        yield from fields(child, f"{path}.{name}")
    for key, suffix in (("items", "[]"), ("additionalProperties", "{}")):
        if isinstance(node.get(key), dict):
            yield from fields(node[key], path + suffix)


def is_string(node: dict[str, Any]) -> bool:
    """Strings, including int-or-string values (quantities)."""
    return node.get("type") == "string" or bool(node.get("x-kubernetes-int-or-string"))


def refs(schema: dict[str, Any]) -> list[str]:
    """Paths of nodes that use ``$ref`` (structural schemas are fully inlined)."""
    return [path for path, node, _ in walk(schema) if "$ref" in node]


def junctor_schemas(schema: dict[str, Any]) -> list[str]:
    """``type``/``nullable``/``description``/``default`` inside anyOf/oneOf/allOf/not."""
    return [
        f"{path}: {key}"
        for path, node, in_junctor in walk(schema)
        if in_junctor
        for key in SCHEMA_ONLY_IN_JUNCTORS
        if key in node
    ]


def forbidden_keywords(schema: dict[str, Any]) -> list[str]:
    """Keywords the API server rejects, and ``additionalProperties: false``."""
    found = [
        f"{path}: {keyword}"
        for path, node, _ in walk(schema)
        for keyword in ("uniqueItems", "const", "patternProperties", "$schema")
        if keyword in node
    ]
    found += [
        f"{path}: additionalProperties: false"
        for path, node, _ in walk(schema)
        if node.get("additionalProperties") is False
    ]
    return found


def bad_maps(schema: dict[str, Any]) -> list[str]:
    """Nodes with both properties and additionalProperties, or a non-schema additionalProperties."""
    return [
        path
        for path, node, _ in walk(schema)
        if "additionalProperties" in node
        and ("properties" in node or not isinstance(node["additionalProperties"], dict))
    ]


def untyped(schema: dict[str, Any]) -> list[str]:
    """Nodes without a type (outside junctors), or int-or-string nodes with one."""
    return [
        path
        for path, node, in_junctor in walk(schema)
        if not in_junctor
        and ("type" in node) == bool(node.get("x-kubernetes-int-or-string"))
        and not node.get("x-kubernetes-preserve-unknown-fields")
    ]


def undescribed(schema: dict[str, Any], part: str) -> list[str]:
    """Fields of ``part`` (spec or status) without a description."""
    root = schema["properties"][part]
    missing = [] if root.get("description") else [part]
    return missing + [path for path, node in fields(root, part) if not node.get("description")]


def unbounded(schema: dict[str, Any]) -> list[str]:
    """Spec strings without maxLength/enum, lists without maxItems, maps without maxProperties."""
    found = []
    for path, node, _ in walk(schema["properties"]["spec"], "spec"):
        if is_string(node) and "maxLength" not in node and "enum" not in node:
            found.append(f"{path}: maxLength")
        if node.get("type") == "array" and "maxItems" not in node:
            found.append(f"{path}: maxItems")
        if isinstance(node.get("additionalProperties"), dict) and "maxProperties" not in node:
            found.append(f"{path}: maxProperties")
    return found


CHECKS = {
    "refs": refs,
    "junctor_schemas": junctor_schemas,
    "forbidden_keywords": forbidden_keywords,
    "bad_maps": bad_maps,
    "untyped": untyped,
    "spec_undescribed": lambda schema: undescribed(schema, "spec"),
    "status_undescribed": lambda schema: undescribed(schema, "status"),
    "unbounded": unbounded,
}


@pytest.mark.parametrize("check", CHECKS)
def test_the_generated_schema_passes_the_structural_check(
    schema: dict[str, Any], check: str
) -> None:
    assert CHECKS[check](schema) == []


def _spec_field(node: dict[str, Any]) -> dict[str, Any]:
    """A schema whose spec has one field ``x`` with schema ``node``."""
    field = {"description": "x", **node}
    status = {"type": "object", "description": "s"}
    return {
        "type": "object",
        "properties": {
            "spec": {"type": "object", "description": "s", "properties": {"x": field}},
            "status": status,
        },
    }


BROKEN = [
    ("refs", {"type": "object", "$ref": "#/$defs/Other"}),
    ("junctor_schemas", {"type": "string", "anyOf": [{"type": "string"}]}),
    ("junctor_schemas", {"type": "string", "oneOf": [{"description": "d"}]}),
    ("forbidden_keywords", {"type": "array", "uniqueItems": True, "maxItems": 1}),
    ("forbidden_keywords", {"type": "string", "const": "a"}),
    ("forbidden_keywords", {"type": "object", "additionalProperties": False}),
    ("bad_maps", {"type": "object", "properties": {}, "additionalProperties": {"type": "string"}}),
    ("bad_maps", {"type": "object", "additionalProperties": True}),
    ("untyped", {"maxLength": 3}),
    ("untyped", {"type": "string", "x-kubernetes-int-or-string": True}),
    ("spec_undescribed", {"type": "object", "properties": {"y": {"type": "integer"}}}),
    ("unbounded", {"type": "string"}),
    ("unbounded", {"type": "array", "items": {"type": "integer"}}),
    ("unbounded", {"type": "object", "additionalProperties": {"type": "integer"}}),
    ("unbounded", {"x-kubernetes-int-or-string": True}),
]


@pytest.mark.parametrize(("check", "node"), BROKEN)
def test_the_structural_check_catches_a_violation(check: str, node: dict[str, Any]) -> None:
    assert CHECKS[check](_spec_field(node)) != []


def test_formats_are_cel_rules_with_messages_not_schema_patterns(schema: dict[str, Any]) -> None:
    # A pattern failure shows only the regex, and does not stop the field's other CEL rules.
    assert [path for path, node, _ in walk(schema) if "pattern" in node] == []


def test_every_cel_rule_compiles_and_has_a_message(schema: dict[str, Any]) -> None:
    rules = [
        (path, rule)
        for path, node, _ in walk(schema)
        for rule in node.get("x-kubernetes-validations", [])
    ]
    assert len(rules) >= 10
    for path, rule in rules:
        assert rule.get("message"), f"{path}: rule {rule['rule']!r} has no message"
        _program(rule["rule"])  # raises on a syntax error


def test_the_immutable_user_fields_are_guarded_by_transition_rules(schema: dict[str, Any]) -> None:
    user = schema["properties"]["spec"]["properties"]["user"]
    rules = {rule["rule"] for rule in user["x-kubernetes-validations"]}
    assert rules == {"self.id == oldSelf.id", "self.tenantId == oldSelf.tenantId"}
    assert user["required"] == ["id"]
    assert user["properties"]["tenantId"]["default"] == "public"


def test_library_mode_is_an_enum_of_exec_and_job(schema: dict[str, Any]) -> None:
    mode = schema["properties"]["spec"]["properties"]["userLibrary"]["properties"]["mode"]
    assert mode["enum"] == ["Exec", "Job"]
    assert mode["default"] == "Exec"


def test_names_short_name_category_and_scope(crd: dict[str, Any]) -> None:
    spec = crd["spec"]
    assert crd["metadata"]["name"] == "craftsandboxes.craft.onyx.app"
    assert spec["group"] == "craft.onyx.app"
    assert spec["scope"] == "Namespaced"
    assert spec["names"] == {
        "kind": "CraftSandbox",
        "listKind": "CraftSandboxList",
        "plural": "craftsandboxes",
        "singular": "craftsandbox",
        "shortNames": ["csb"],
        "categories": ["craft"],
    }


def test_the_version_is_served_stored_and_has_a_status_subresource(
    version: dict[str, Any],
) -> None:
    assert (version["served"], version["storage"]) == (True, True)
    assert version["subresources"] == {"status": {}}


def test_printer_columns_are_user_phase_ready_library_age(version: dict[str, Any]) -> None:
    columns = version["additionalPrinterColumns"]
    assert [column["name"] for column in columns] == ["User", "Phase", "Ready", "Library", "Age"]
    assert columns[-1] == {
        "name": "Age",
        "type": "date",
        "jsonPath": ".metadata.creationTimestamp",
    }


def test_printer_columns_point_at_fields_of_the_schema(
    version: dict[str, Any], schema: dict[str, Any]
) -> None:
    for column in version["additionalPrinterColumns"]:
        path = column["jsonPath"].split("[", 1)[0].strip(".").split(".")
        if path[0] == "metadata":
            continue
        node = schema
        for part in path:
            node = node["properties"][part]
            if node.get("type") == "array":
                node = node["items"]
        if column["type"] in ("integer", "number"):
            assert node["type"] == column["type"], column["name"]


def newest_kubernetes_versions(count: int = 3) -> list[str]:
    """The newest Kubernetes versions whose schemas kubernetes-validate ships."""
    versions = sorted(set(all_versions()), key=lambda text: tuple(int(p) for p in text.split(".")))
    return versions[-count:]


@pytest.mark.parametrize("kubernetes_version", newest_kubernetes_versions())
def test_the_crd_is_a_valid_apiextensions_v1_object(
    crd: dict[str, Any], kubernetes_version: str
) -> None:
    try:
        kubernetes_validate.validate(crd, kubernetes_version, strict=True)
    except kubernetes_validate.ValidationError as exc:
        pytest.fail(f"{'.'.join(map(str, exc.path))}: {exc.message}")


def test_the_apiextensions_check_would_catch_a_misspelt_field(crd: dict[str, Any]) -> None:
    broken = {**crd, "spec": {**crd["spec"], "subresource": {"status": {}}}}
    with pytest.raises(kubernetes_validate.ValidationError, match="subresource"):
        kubernetes_validate.validate(broken, newest_kubernetes_versions(1)[0], strict=True)
