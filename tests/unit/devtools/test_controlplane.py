"""The local control plane's pieces that need no running cluster."""

from __future__ import annotations

from pathlib import Path

import pytest

from craft_operator.devtools.controlplane import ControlPlane, ControlPlaneError, Ports, main
from craft_operator.devtools.daemons import BINARIES, NODE_NAME, build_node


def test_the_node_points_the_kubelet_endpoint_at_podexec() -> None:
    node = build_node(kubelet_port=23456)
    assert node["metadata"]["name"] == NODE_NAME
    assert node["status"]["daemonEndpoints"] == {"kubeletEndpoint": {"Port": 23456}}
    # kwok adds the addresses itself; the API server must not be told of websocket kubelets.
    assert "addresses" not in node["status"]
    assert "declaredFeatures" not in node["status"]


def test_the_node_has_room_for_the_load_benchmark() -> None:
    assert int(build_node(1)["status"]["allocatable"]["pods"]) >= 10_000


def test_free_ports_are_distinct() -> None:
    ports = Ports.free()
    numbers = [ports.apiserver, ports.etcd_client, ports.etcd_peer, ports.kubelet]
    numbers += [ports.controller_manager, ports.scheduler]
    assert len(set(numbers)) == 6


def test_up_without_the_binaries_says_how_to_build_them(tmp_path: Path) -> None:
    plane = ControlPlane(tmp_path / "state", tmp_path / "bin", Ports.free())
    with pytest.raises(ControlPlaneError, match=r"hack/controlplane/build.sh"):
        plane.up()
    assert not (tmp_path / "state").exists()


def test_up_names_every_missing_binary(tmp_path: Path) -> None:
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "etcd").write_text("")
    plane = ControlPlane(tmp_path / "state", tmp_path / "bin", Ports.free())
    with pytest.raises(ControlPlaneError) as raised:
        plane.up()
    for name in BINARIES[1:]:
        assert name in str(raised.value)


def test_down_with_nothing_running_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["down", "--state", str(tmp_path)]) == 0
    assert capsys.readouterr().out == "nothing was running\n"


def test_status_of_a_stopped_control_plane_fails(tmp_path: Path) -> None:
    assert main(["status", "--state", str(tmp_path)]) == 1
