"""The import rules of ARCHITECTURE.md: rooms import only rooms below them, and no module
imports itself through a cycle; and the table of steps it quotes."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

import craft_operator

pytestmark = pytest.mark.unit

PACKAGE = Path(craft_operator.__file__).parent

#: Each room's level: a module may import its own room and rooms of a lower level only.
LEVELS: dict[str, int] = {
    "__init__": 0,  # the package itself: its version
    "api": 0,
    "daemon_threads": 0,  # a thread pool: imports nothing of ours
    "yaml_errors": 0,  # a YAML error said without the document: imports nothing of ours
    "pat_format": 0,  # how a PAT begins: imports nothing of ours
    "config": 1,
    "client": 1,  # the backend's client: the API models and aiohttp, nothing of the operator
    "kube": 2,
    "skills": 2,
    "policy": 2,
    "permissions": 3,
    "library": 3,
    "status": 3,
    "metrics": 3,
    "access": 4,
    "credentials": 4,
    "builders": 4,
    "reconciler": 6,
    "peering": 7,
    "context": 8,
    "handlers": 9,
    "runtime": 10,
    "doctor": 10,
    "cli": 11,
    "devtools": 11,
    "migrations": 11,
}

#: Imports against the levels, each with the reason it is fine.
ALLOWED_UPWARD: dict[tuple[str, str], str] = {
    # Validating the key ring's format where the setting is read; keyring.py and errors.py
    # import nothing of ours, so this adds no cycle.
    ("craft_operator.config", "craft_operator.credentials.keyring"): "format check only",
    ("craft_operator.config", "craft_operator.credentials.errors"): "format check only",
    # The default resources checked as a pod's are; quantities.py imports only
    # api.constants, which imports nothing of ours.
    ("craft_operator.config", "craft_operator.builders.quantities"): "format check only",
}


def module_name(path: Path) -> str:
    """``craft_operator.kube.client`` for ``.../craft_operator/kube/client.py``."""
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def room(module: str) -> str:
    """The room of a module: its package under craft_operator, or its own name."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def imports(path: Path, *, top_level_only: bool) -> Iterator[str]:
    """The craft_operator modules ``path`` imports (names that are modules, not symbols)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    nodes = tree.body if top_level_only else list(ast.walk(tree))
    for node in nodes:
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("craft_operator"):
            assert node.module is not None
            yield node.module
            for alias in node.names:
                candidate = f"{node.module}.{alias.name}"
                if is_module(candidate):
                    yield candidate
        elif isinstance(node, ast.Import):
            yield from (a.name for a in node.names if a.name.startswith("craft_operator"))


def is_module(name: str) -> bool:
    """Whether ``name`` is a module or package of craft_operator."""
    relative = Path(*name.split(".")[1:])
    return (PACKAGE / relative).with_suffix(".py").is_file() or (PACKAGE / relative).is_dir()


def sources() -> list[Path]:
    """Every Python module of the package."""
    return sorted(PACKAGE.rglob("*.py"))


def test_every_room_has_a_level() -> None:
    assert {room(module_name(path)) for path in sources()} <= set(LEVELS)


def test_rooms_import_only_rooms_below_them() -> None:
    upward = []
    for path in sources():
        importer = module_name(path)
        for imported in set(imports(path, top_level_only=False)):
            if room(imported) == room(importer) or (importer, imported) in ALLOWED_UPWARD:
                continue
            if LEVELS[room(imported)] >= LEVELS[room(importer)]:
                upward.append(f"{importer} -> {imported}")
    assert sorted(upward) == []


def test_no_module_imports_itself_through_a_cycle() -> None:
    graph = {
        module_name(path): set(imports(path, top_level_only=True))
        - {"craft_operator", module_name(path)}
        for path in sources()
    }
    cycles = []
    state: dict[str, str] = {}

    def visit(module: str, trail: list[str]) -> None:
        state[module] = "open"
        for imported in sorted(graph.get(module, ())):
            if state.get(imported) == "open":
                cycles.append(" -> ".join([*trail[trail.index(imported) :], imported]))
            elif imported not in state:
                visit(imported, [*trail, imported])
        state[module] = "done"

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])
    assert cycles == []


def reads_of_the_reconcilers_fields(path: Path) -> Iterator[int]:
    """Lines of ``path`` that read ``<something>.reconciler.s``: the reconciler's own bag."""
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and node.attr == "s"
            and isinstance(node.value, ast.Attribute)
            and node.value.attr == "reconciler"
        ):
            yield node.lineno


def test_nothing_outside_the_reconciler_reaches_into_its_services() -> None:
    """The memo holds the one services object (``memo.services``); use that instead."""
    tests = Path(__file__).parents[1]
    reaches = [
        f"{path}:{line}"
        for path in [*sources(), *sorted(tests.rglob("*.py"))]
        for line in reads_of_the_reconcilers_fields(path)
    ]
    assert reaches == []


def test_the_table_of_steps_architecture_md_quotes_is_the_reconcilers() -> None:
    """The rows and their order as ARCHITECTURE.md shows them: it is where a newcomer reads
    which step runs before which."""
    from craft_operator.reconciler import table

    text = (Path(__file__).resolve().parents[2] / "ARCHITECTURE.md").read_text()
    block = re.search(r"STEPS = \((.*?)\n\s*\)\n", text, re.S)
    assert block is not None, "ARCHITECTURE.md quotes STEPS"
    quoted = [
        re.findall(r"(\w+)\.STEP", line.split("#")[0])
        for line in block.group(1).splitlines()
        if ".STEP" in line.split("#")[0]
    ]
    actual = [[step.run.__module__.rsplit(".", 1)[-1] for step in row] for row in table.STEPS]
    assert quoted == actual
