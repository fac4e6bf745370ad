"""``make run`` on a kube context installs what the operator needs before it can act."""

from __future__ import annotations

from pathlib import Path

import yaml

from craft_operator.devtools.local import CRD_NAMES, context_commands

REPO = Path(__file__).resolve().parents[2]


def test_make_run_on_a_kube_context_applies_and_waits_for_every_crd_of_crds() -> None:
    """With the pool CRD missing, the operator's first listing failed and it never acted."""
    listed = yaml.safe_load((REPO / "crds" / "kustomization.yaml").read_text())["resources"]
    names = {f"crd/{Path(resource).name.removesuffix('.yaml')}" for resource in listed}

    apply, wait = context_commands(REPO)

    assert apply == ["kubectl", "apply", "--server-side", "-k", str(REPO / "crds")]
    assert set(CRD_NAMES) == names
    assert wait[:2] == ["kubectl", "wait"]
    assert set(wait) >= names
