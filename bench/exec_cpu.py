"""Operator CPU per exec call on the real control plane, for the exec transport under test.

A control plane of its own (kube-apiserver proxying ``pods/exec`` to the ``podexec``
simulator, see ``craft_operator.devtools.controlplane``), one kwok pod in a restricted
namespace, and a fresh process that runs the operator's exec transport as the operator's
ServiceAccount: a first call (setting the transport up included), a few warm-up calls,
then ``--calls`` calls without stdin (``sh -c 'echo hi'``) and as many with 64 KiB of
stdin (``wc -c``), one after the other. It prints the CPU of the first call, the process's
CPU per call (all its threads; user and system apart), the wall time per call, whether
the ``kubernetes`` client was imported, and the process's peak RSS.

    .venv/bin/python bench/exec_cpu.py --calls 100
    .venv/bin/python bench/exec_cpu.py --compare /path/to/old/checkout/operator

``--compare DIR`` runs the transport of another checkout (its ``operator/`` directory)
first, then this one's, with the same control plane, so that two versions compare on one
machine in one run; ``BENCH_OPERATOR_PYTHONPATH=DIR`` runs only that checkout's.
``BENCH_PROFILE=FILE`` also writes a cProfile of the calls (in CPU time) to FILE.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

NAMESPACE = "exec-bench"
POD = "bench"
CONTAINER = "sandbox"


def pod_manifest() -> dict[str, Any]:
    """A pod that Pod Security ``restricted`` admits (kwok runs it)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": POD, "namespace": NAMESPACE},
        "spec": {
            "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [
                {
                    "name": CONTAINER,
                    "image": "craft-sandbox",
                    "securityContext": {
                        "allowPrivilegeEscalation": False,
                        "capabilities": {"drop": ["ALL"]},
                    },
                }
            ],
        },
    }


async def _transport() -> Any:
    """The exec transport of the code on the path: the aiohttp one, else the older one."""
    try:
        from craft_operator.kube.client import KubeClient
        from craft_operator.kube.exec_aiohttp import AiohttpExec
        from craft_operator.kube.login import from_kubeconfig
    except ImportError:
        from craft_operator.kube.exec import KubernetesExec  # type: ignore[attr-defined]

        return await asyncio.to_thread(KubernetesExec.from_environment)
    kube = KubeClient()
    info = from_kubeconfig()
    assert info is not None
    kube.configure(info)
    return AiohttpExec(kube)


async def measure(calls: int) -> dict[str, Any]:
    """CPU and wall time per call of this process's exec transport (and of its first call,
    which sets the transport up)."""
    import craft_operator.cli  # noqa: F401 - kopf imported as `craft-operator run` does

    first = time.process_time()
    transport = await _transport()

    async def one(stdin: bytes | None) -> None:
        argv = ["wc", "-c"] if stdin else ["sh", "-c", "echo hi"]
        result = await transport.run(NAMESPACE, POD, CONTAINER, argv, stdin=stdin, timeout=30)
        assert result.exit_code == 0, result.stderr

    await one(None)
    figures: dict[str, Any] = {
        "transport": type(transport).__name__,
        "first_call_cpu_ms": (time.process_time() - first) * 1000,
    }
    for _ in range(3):
        await one(None)
    for label, stdin in (("no_stdin", None), ("stdin_64k", b"x" * 65536)):
        usage, wall = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
        for _ in range(calls):
            await one(stdin)
        after = resource.getrusage(resource.RUSAGE_SELF)
        user, system = after.ru_utime - usage.ru_utime, after.ru_stime - usage.ru_stime
        figures[label] = {
            "cpu_ms": (user + system) * 1000 / calls,
            "user_ms": user * 1000 / calls,
            "system_ms": system * 1000 / calls,
            "wall_ms": (time.perf_counter() - wall) * 1000 / calls,
        }
    figures["kubernetes_imported"] = "kubernetes" in sys.modules
    figures["max_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return figures


def run_child(kubeconfig: Path, calls: int, code: str | None) -> dict[str, Any]:
    """``measure`` in a fresh process, with ``code`` (an ``operator/`` directory) first."""
    env = {**os.environ, "KUBECONFIG": str(kubeconfig)}
    if code:
        env["PYTHONPATH"] = code
    result = subprocess.run(
        [sys.executable, __file__, "--child", "--calls", str(calls)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    figures: dict[str, Any] = json.loads(result.stdout.splitlines()[-1])
    return figures


def code_under_test() -> str | None:
    """The ``operator/`` directory ``BENCH_OPERATOR_PYTHONPATH`` names, if any."""
    return os.environ.get("BENCH_OPERATOR_PYTHONPATH") or None


def main() -> None:
    """Start the control plane and a pod, then measure each transport asked for."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=100)
    parser.add_argument("--compare", help="another checkout's operator/ directory, run first")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        if os.environ.get("BENCH_PROFILE"):  # a cProfile of the calls, in CPU time
            import cProfile

            profile = cProfile.Profile(time.process_time)
            profile.runcall(asyncio.run, measure(args.calls))
            profile.dump_stats(os.environ["BENCH_PROFILE"])
        print(json.dumps(asyncio.run(measure(args.calls))))
        return

    from tests.support.cluster import Cluster, controlplane_binaries, wait_for

    from craft_operator.devtools.controlplane import ControlPlane, Ports, default_onyx_cli

    with tempfile.TemporaryDirectory(prefix="exec-cpu-") as tmp:
        state = Path(tmp)
        plane = ControlPlane(
            state / "controlplane", controlplane_binaries(), Ports.free(), default_onyx_cli()
        )
        try:
            plane.up(timeout=120)
            cluster = Cluster(plane)
            cluster.install()
            cluster.sandbox_namespace(NAMESPACE)
            cluster.create("/api/v1/pods", NAMESPACE, pod_manifest())
            wait_for(
                lambda: (
                    (cluster.get("/api/v1/pods", NAMESPACE, POD) or {})
                    .get("status", {})
                    .get("phase")
                    == "Running"
                ),
                within=60,
                what="the pod running",
            )
            kubeconfig = cluster.service_account_kubeconfig(state / "operator.kubeconfig")
            codes = [args.compare, None] if args.compare else [code_under_test()]
            for code in codes:
                figures = run_child(kubeconfig, args.calls, code)
                print(code or "this checkout", json.dumps(figures), flush=True)
        finally:
            plane.down()


if __name__ == "__main__":
    main()
