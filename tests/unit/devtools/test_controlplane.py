"""The local control plane's pieces that need no running cluster."""

from __future__ import annotations

import os
import subprocess
import time
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


BUILD_SCRIPT = Path(__file__).resolve().parents[3] / "hack" / "controlplane" / "build.sh"


def build_key() -> str:
    """The cache key build.sh computes: a hash of its module's files."""
    listing = "find build.sh go.mod go.sum cmd -type f | LC_ALL=C sort | xargs sha256sum"
    command = f"{listing} | sha256sum | cut -c1-16"
    run = subprocess.run(
        ["bash", "-c", command], cwd=BUILD_SCRIPT.parent, capture_output=True, text=True
    )
    return run.stdout.strip()


def fake_build(directory: Path, age_s: float) -> Path:
    directory.mkdir(parents=True)
    for name in BINARIES:
        binary = directory / name
        binary.write_text("#!/bin/sh\n")
        binary.chmod(0o755)
    stamp = time.time() - age_s
    os.utime(directory, (stamp, stamp))
    return directory


def test_a_cached_build_is_used_and_the_cache_keeps_the_three_builds_used_last(
    tmp_path: Path,
) -> None:
    cache = tmp_path / "cache"
    ours = fake_build(cache / build_key(), age_s=10 * 86400)
    for age in (1, 2, 3):
        fake_build(cache / f"other{age}", age_s=age * 3600)
    building = cache / ".build-young"
    building.mkdir()
    abandoned = cache / ".build-old"
    abandoned.mkdir()
    os.utime(abandoned, (time.time() - 2 * 86400,) * 2)

    # No Go on the path: a complete cached build needs none.
    environ = {"PATH": "/usr/bin:/bin", "CRAFT_CONTROLPLANE_CACHE": str(cache)}
    run = subprocess.run(
        ["bash", str(BUILD_SCRIPT)], env=environ, capture_output=True, text=True, check=True
    )

    assert run.stdout.strip() == str(ours)
    left = sorted(path.name for path in cache.iterdir())
    # Used now, ours is the newest; of the others the two used last stay, and a staging
    # directory another build may still be filling is not touched; one abandoned goes.
    assert left == sorted([ours.name, "other1", "other2", building.name])


def failing_tools(directory: Path, names: tuple[str, ...]) -> Path:
    """``names`` as commands that fail as they do on a read-only file system (a root's
    chmod stops no write, so the tests shadow the tools instead)."""
    directory.mkdir()
    for name in names:
        tool = directory / name
        tool.write_text(f'#!/bin/sh\necho "{name}: Read-only file system" >&2\nexit 1\n')
        tool.chmod(0o755)
    return directory


@pytest.mark.parametrize(
    "failing",
    [("touch", "rm"), ("rm",)],
    ids=["a read-only cache", "a cache whose builds cannot be removed"],
)
def test_a_cached_build_in_a_cache_it_cannot_tidy_is_used_all_the_same(
    tmp_path: Path, failing: tuple[str, ...]
) -> None:
    """A shared cache, read-only to this user or on a read-only mount, failed the run at
    the touch that marks the build as used, although the build was there to be used."""
    cache = tmp_path / "cache"
    ours = fake_build(cache / build_key(), age_s=10 * 86400)
    for age in (1, 2, 3):
        fake_build(cache / f"other{age}", age_s=age * 3600)
    abandoned = cache / ".build-old"
    abandoned.mkdir()
    os.utime(abandoned, (time.time() - 2 * 86400,) * 2)
    tools = failing_tools(tmp_path / "tools", failing)

    environ = {"PATH": f"{tools}:/usr/bin:/bin", "CRAFT_CONTROLPLANE_CACHE": str(cache)}
    run = subprocess.run(["bash", str(BUILD_SCRIPT)], env=environ, capture_output=True, text=True)

    assert (run.returncode, run.stdout.strip()) == (0, str(ours)), run.stderr
    assert sorted(path.name for path in cache.iterdir()) == sorted(
        [ours.name, "other1", "other2", "other3", abandoned.name]
    )
    assert str(cache) in run.stderr
