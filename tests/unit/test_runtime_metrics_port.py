"""The metrics port is bound before kopf starts anything: one that is taken stops the start
with one line naming CRAFT_METRICS_PORT (as every expected start-up failure), never with a
traceback from the middle of a running operator."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import aiohttp.web
import kmock
import pytest
from kmock._internal import rendering

from craft_operator.access import SSAR_PATH
from craft_operator.config import Settings
from craft_operator.runtime import StartupError, run_operator
from tests.support.emulator import KubeEmulator, declare_core_resources

pytestmark = pytest.mark.unit

SCRIPT = Path(sys.executable).with_name("craft-operator")


@contextmanager
def taken_port() -> Iterator[int]:
    """A port another process (here: a socket of this one) listens on, every IPv4 address."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as holder:
        holder.bind(("0.0.0.0", 0))
        holder.listen()
        yield int(holder.getsockname()[1])


async def test_a_taken_metrics_port_stops_the_start_before_kopf_logs_in(tmp_path: Path) -> None:
    logins: list[object] = []
    stop = asyncio.Event()
    stop.set()  # should the operator start after all, it stops at once
    with taken_port() as port:
        settings = Settings(
            state_dir=tmp_path, server_url="http://onyx.test:8080", metrics_port=port
        )
        with pytest.raises(StartupError) as raised:
            await asyncio.wait_for(
                run_operator(settings, login=lambda **kw: logins.append(kw), stop_flag=stop),
                timeout=60,
            )
    message = str(raised.value)
    assert f"port {port} (CRAFT_METRICS_PORT)" in message
    assert logins == [], "kopf never started"


async def allow_every_review(request: rendering.Request) -> aiohttp.web.StreamResponse | None:
    if request.url.path == SSAR_PATH:
        return aiohttp.web.json_response({"status": {"allowed": True}}, status=201)
    return None


def kubeconfig(path: Path, server: str) -> Path:
    path.write_text(
        "apiVersion: v1\nkind: Config\n"
        f"clusters: [{{name: c, cluster: {{server: '{server}'}}}}]\n"
        "contexts: [{name: x, context: {cluster: c, user: u}}]\n"
        "current-context: x\nusers: [{name: u, user: {token: not-a-real-token}}]\n",
        encoding="utf-8",
    )
    return path


async def test_craft_operator_run_with_its_metrics_port_taken_says_so_in_one_line(
    tmp_path: Path,
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    async with KubeEmulator() as emulator, kmock.Server(emulator):
        declare_core_resources(emulator)
        emulator.before_request.append(allow_every_review)
        config = kubeconfig(tmp_path / "kubeconfig", str(emulator.url).rstrip("/"))
        with taken_port() as port:
            env = {
                "PATH": "/usr/bin:/bin",
                "HOME": str(home),
                "LANG": "C.UTF-8",
                "KUBECONFIG": str(config),
                "CRAFT_METRICS_PORT": str(port),
                "CRAFT_SERVER_URL": "http://onyx.test:8080",
            }
            completed = await asyncio.to_thread(
                subprocess.run,
                [str(SCRIPT), "run", "--standalone"],
                capture_output=True,
                text=True,
                env=env,
                timeout=120,
                check=False,
            )
    assert completed.returncode == 1, completed.stderr
    [line] = completed.stderr.splitlines()
    assert line.startswith(f"craft-operator: cannot serve the metrics on port {port} ")
    assert "(CRAFT_METRICS_PORT): Address already in use" in line
    assert completed.stdout == ""
