"""``make run`` chooses the current kube context when there is one, else a local cluster."""

from __future__ import annotations

from pathlib import Path

from craft_operator.devtools.local import current_context


def write_config(path: Path, context: str | None) -> Path:
    lines = ["apiVersion: v1", "kind: Config"]
    if context is not None:
        lines.append(f"current-context: {context}")
    path.write_text("\n".join(lines) + "\n")
    return path


def test_the_default_kubeconfig_names_the_context(tmp_path: Path) -> None:
    write_config((tmp_path / ".kube").mkdir() or tmp_path / ".kube" / "config", "kind-dev")
    assert current_context({"HOME": str(tmp_path)}) == "kind-dev"


def test_no_kubeconfig_means_no_context(tmp_path: Path) -> None:
    assert current_context({"HOME": str(tmp_path)}) is None


def test_a_kubeconfig_without_a_current_context_is_no_context(tmp_path: Path) -> None:
    config = write_config(tmp_path / "config", None)
    assert current_context({"HOME": str(tmp_path), "KUBECONFIG": str(config)}) is None


def test_kubeconfig_lists_files_and_the_first_with_a_context_wins(tmp_path: Path) -> None:
    first = write_config(tmp_path / "a", None)
    second = write_config(tmp_path / "b", "prod")
    value = f"{tmp_path / 'missing'}:{first}:{second}"
    assert current_context({"HOME": str(tmp_path), "KUBECONFIG": value}) == "prod"


def test_an_unreadable_kubeconfig_is_no_context(tmp_path: Path) -> None:
    broken = tmp_path / "config"
    broken.write_text("{not: yaml: at all")
    assert current_context({"HOME": str(tmp_path), "KUBECONFIG": str(broken)}) is None


def test_inside_a_pod_the_in_cluster_config_is_the_context(tmp_path: Path) -> None:
    environ = {"HOME": str(tmp_path), "KUBERNETES_SERVICE_HOST": "10.96.0.1"}
    assert current_context(environ) == "in-cluster"
