"""The client is importable without the operator: no kopf, database, AWS or kubernetes."""

from __future__ import annotations

import json
import subprocess
import sys

from craft_operator import status
from craft_operator.client import readiness
from craft_operator.reconciler.table import CONDITIONS

#: Top-level packages the backend must not pull in by importing the client.
FORBIDDEN = {"kopf", "sqlalchemy", "alembic", "boto3", "botocore", "kubernetes", "jinja2"}


def modules_after_importing(module: str) -> set[str]:
    """Every module loaded by a fresh interpreter that imports ``module``."""
    code = f"import sys, json, {module}; print(json.dumps(sorted(sys.modules)))"
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    return set(json.loads(result.stdout))


def test_the_client_imports_none_of_kopf_sqlalchemy_alembic_boto3_or_kubernetes() -> None:
    loaded = modules_after_importing("craft_operator.client")

    assert {name.split(".")[0] for name in loaded} & FORBIDDEN == set()
    ours = {name for name in loaded if name.startswith("craft_operator.")}
    assert {name.split(".")[1] for name in ours} == {"api", "client", "yaml_errors"}
    assert "craft_operator.api.crd" not in ours  # only the models, not CRD generation


def test_the_check_would_see_a_forbidden_import() -> None:
    assert "kopf" in modules_after_importing("craft_operator.kube.client")


def test_the_client_reads_readiness_as_the_operator_aggregates_it() -> None:
    assert readiness.REQUIRED == CONDITIONS
    assert readiness.READY == status.READY
