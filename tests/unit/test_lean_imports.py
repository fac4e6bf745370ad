"""The operator at idle carries only what it runs: kopf without the ``kubernetes`` client,
no boto3, no SQLAlchemy or Alembic until the credential store is opened, and only the
command it was started with; exec needs no ``kubernetes`` client either."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

#: Packages the idle operator must not have imported (each is 10 to 45 MiB of memory):
#: ``kubernetes`` is imported for a kubeconfig that needs it, boto3 for a library, and
#: SQLAlchemy, Alembic (and its Mako) when the first sandbox opens the credential store.
NOT_AT_IDLE = {"kubernetes", "boto3", "botocore", "sqlalchemy", "alembic", "mako"}

IDLE_OPERATOR = """
import json, sys
from craft_operator.cli import main
run = main.get_command(None, "run")  # what `craft-operator run` imports
from craft_operator.config import Settings
from craft_operator.kube.connection import discover_connection
from craft_operator.runtime import build_context, build_registry
context = build_context(Settings(state_dir=sys.argv[1], server_url="http://onyx.test:8080"))
build_registry(context, login=lambda **_: None)
discover_connection()
print(json.dumps(sorted(sys.modules)))
"""


def top_level_packages(tmp_path: Path, kubeconfig_user: str) -> set[str]:
    """The top-level packages a fresh interpreter holds once it is set up as the operator,
    logging in with this kubeconfig user."""
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\n"
        "clusters: [{name: c, cluster: {server: 'http://127.0.0.1:1'}}]\n"
        "contexts: [{name: x, context: {cluster: c, user: u}}]\n"
        f"current-context: x\nusers: [{{name: u, user: {kubeconfig_user}}}]\n"
    )
    env = {"PATH": "/usr/bin:/bin", "KUBECONFIG": str(kubeconfig), "HOME": str(tmp_path)}
    result = subprocess.run(
        [sys.executable, "-c", IDLE_OPERATOR, str(tmp_path)],
        capture_output=True,
        text=True,
        check=True,
        env=env,
    )
    return {name.split(".")[0] for name in json.loads(result.stdout)}


def test_the_idle_operator_imports_neither_the_kubernetes_client_nor_boto3_nor_the_database(
    tmp_path: Path,
) -> None:
    loaded = top_level_packages(tmp_path, "{token: operator}")

    assert "kopf" in loaded
    assert loaded & NOT_AT_IDLE == set()


def test_the_check_would_see_the_client_imported_for_a_kubeconfig_that_needs_it(
    tmp_path: Path,
) -> None:
    loaded = top_level_packages(tmp_path, "{token: operator, tokenFile: /dev/null}")

    assert "kubernetes" in loaded


def test_only_the_command_line_changes_how_kopf_is_imported() -> None:
    probe = (
        "import sys, craft_operator.client; "
        "print(any(type(f).__name__ == '_KopfWithoutKubernetes' for f in sys.meta_path)); "
        "import craft_operator.cli; "
        "print(any(type(f).__name__ == '_KopfWithoutKubernetes' for f in sys.meta_path))"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    )
    assert result.stdout.split() == ["False", "True"]


EXEC_CALL = """
import asyncio, json, sys
from craft_operator.cli import main
run = main.get_command(None, "run")
import kopf
from aiohttp import web
from craft_operator.config import Settings
from craft_operator.runtime import build_context

async def exec_endpoint(request):
    ws = web.WebSocketResponse(protocols=("v5.channel.k8s.io",))
    await ws.prepare(request)
    async for message in ws:
        if message.data == b"\\xff\\x00":  # stdin closed
            break
    await ws.send_bytes(b"\\x01hello")
    await ws.send_bytes(b'\\x03{"status":"Success"}')
    await ws.close()
    return ws

async def exec_once():
    app = web.Application()
    app.router.add_get("/api/v1/namespaces/{namespace}/pods/{pod}/exec", exec_endpoint)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    port = runner.addresses[0][1]
    context = build_context(Settings(state_dir=sys.argv[1], server_url="http://onyx.test:8080"))
    context.kube.configure(kopf.ConnectionInfo(server=f"http://127.0.0.1:{port}", insecure=True))
    try:
        return await context.services.exec.run("ns", "pod", "c", ["cat"], stdin=b"x", timeout=10)
    finally:
        await context.kube.close()
        await runner.cleanup()

result = asyncio.run(exec_once())
print(json.dumps({"stdout": result.stdout.decode(), "modules": sorted(sys.modules)}))
"""


def test_the_operators_exec_runs_without_the_kubernetes_client(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-c", EXEC_CALL, str(tmp_path)],
        capture_output=True,
        text=True,
        check=True,
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
    )
    answer = json.loads(result.stdout)
    loaded = {name.split(".")[0] for name in answer["modules"]}

    assert answer["stdout"] == "hello"
    assert "aiohttp" in loaded
    assert "kubernetes" not in loaded
    assert "websocket" not in loaded
