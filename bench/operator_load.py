"""Load benchmark: N CraftSandboxes created at once against the (indexed) emulator.

The emulator runs in this process (with the driver); the operator runs as it does in
production, ``craft-operator run``, in its own process, so its CPU time and memory are
its own and not the server's. Prints, per N:

- sandboxes provisioned per second (CR created -> its pod created) and p50/p99 latency;
- API reads and writes per sandbox (the operator's requests, counted by the server);
- the operator's CPU seconds per sandbox and its RSS;
- for a no-op resync of all of them (the operator restarted: it lists everything and
  reconciles each sandbox), write calls, and CPU per sandbox.

    .venv/bin/python bench/operator_load.py [--sizes 100,1000] [--workers 16]
    BENCH_PROFILE=/tmp/profile.txt ...   # also record the operator with py-spy (raw format)
    BENCH_LOG=1 ...                      # print the end of the operator's log

Targets (issue 4): <= 3 ms operator CPU per provisioning, p99 < 250 ms at N=1000, <= 5
writes per provisioning, 0 writes on a no-op resync, RSS < 150 MiB at 10,000.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import kmock
import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.integration.conftest import OPERATOR_AGENTS, SANDBOXES, declare_craft_resources
from tests.support.emulator import WRITE_METHODS, KubeEmulator, declare_core_resources

from craft_operator.credentials.keyring import generate_key_entry

NAMESPACE = "load"
USER_ID = "3f2b8c1e-9d4a-4e6b-8f0a-1c2d3e4f5a6b"


@dataclass
class Timeline:
    created: dict[str, float] = field(default_factory=dict)
    pods: dict[str, float] = field(default_factory=dict)
    done: asyncio.Event = field(default_factory=asyncio.Event)
    expected: int = 0


def kubeconfig(path: Path, url: str) -> Path:
    path.write_text(
        "apiVersion: v1\nkind: Config\n"
        f"clusters: [{{name: bench, cluster: {{server: '{url}'}}}}]\n"
        "contexts: [{name: bench, context: {cluster: bench, user: bench}}]\n"
        "current-context: bench\n"
        "users: [{name: bench, user: {token: bench}}]\n"
    )
    return path


def start_operator(url: str, state: Path, workers: int, keys: str) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "KUBECONFIG": str(kubeconfig(state / "kubeconfig", url)),
        "CRAFT_STATE_DIR": str(state),
        "CRAFT_SERVER_URL": "http://onyx.invalid:8080",
        "CRAFT_ENCRYPTION_KEYS": keys,
        "CRAFT_WORKERS": str(workers),
        "CRAFT_METRICS_PORT": "0",
    }
    binary = Path(sys.executable).parent / "craft-operator"
    return subprocess.Popen(
        [str(binary), "run", "--standalone", "-n", NAMESPACE],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=open(state / "operator.log", "ab"),
    )


def operator_requests(emulator: KubeEmulator, since: int = 0) -> list[Any]:
    return [
        request
        for request in emulator.served[since:]
        if request.headers.get("User-Agent", "").startswith(OPERATOR_AGENTS)
    ]


async def settle(
    emulator: KubeEmulator, quiet: float = 1.5, limit: float = 600, since: int | None = None
) -> None:
    """Wait until the operator watches (after ``since`` requests), then is quiet for a while."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + limit
    if since is not None:
        while not any(r.params.get("watch") == "true" for r in operator_requests(emulator, since)):
            if loop.time() > deadline:
                raise TimeoutError("the operator never started watching")
            await asyncio.sleep(0.1)
    seen, since = len(emulator.served), loop.time()
    while loop.time() < deadline:
        await asyncio.sleep(0.2)
        if len(emulator.served) != seen:
            seen, since = len(emulator.served), loop.time()
        elif loop.time() - since > quiet:
            return
    raise TimeoutError("the operator did not settle")


async def stop(child: subprocess.Popen[bytes], state: Path) -> None:
    """SIGTERM, as Kubernetes does; the operator must exit within its grace period.

    The wait is asynchronous: the emulator in this process must keep answering while the
    operator shuts down.
    """
    child.send_signal(signal.SIGTERM)
    try:
        await asyncio.to_thread(child.wait, 60)
    except subprocess.TimeoutExpired:
        child.kill()
        log = (state / "operator.log").read_text(errors="replace")[-4000:]
        raise SystemExit(f"the operator ignored SIGTERM for 60 s; its log:\n{log}") from None


def cpu_seconds(process: psutil.Process) -> float:
    times = process.cpu_times()
    return float(times.user + times.system)


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


async def run_size(n: int, workers: int) -> dict[str, Any]:
    timeline = Timeline(expected=n)
    async with KubeEmulator() as emulator, kmock.Server(emulator):
        declare_core_resources(emulator)
        declare_craft_resources(emulator)
        emulator.keep_history = False

        async def record_pod(request: Any) -> None:
            if request.method.value.upper() == "POST" and request.url.path.endswith("/pods"):
                name = (request.data or {}).get("metadata", {}).get("name")
                if name and name not in timeline.pods:
                    timeline.pods[name] = time.perf_counter()
                    if len(timeline.pods) >= timeline.expected:
                        timeline.done.set()

        emulator.before_request.append(record_pod)
        url = str(emulator.url).rstrip("/")
        with tempfile.TemporaryDirectory(prefix="craft-bench-") as tmp:
            state = Path(tmp)
            keys = generate_key_entry("bench").get_secret_value()  # one ring across restarts
            started = len(emulator.served)
            child = start_operator(url, state, workers, keys)
            process = psutil.Process(child.pid)
            profiler = None
            if os.environ.get("BENCH_PROFILE"):
                profiler = subprocess.Popen(  # noqa: ASYNC220 -- returns at once
                    [
                        str(Path(sys.executable).parent / "py-spy"),
                        "record",
                        "-p",
                        str(child.pid),
                        "-o",
                        os.environ["BENCH_PROFILE"],
                        "-f",
                        "raw",
                        "-r",
                        "200",
                    ],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            try:
                await settle(emulator, quiet=1.0, since=started)
                idle_cpu = cpu_seconds(process)
                before = len(emulator.served)
                for index in range(n):
                    name = f"sandbox-{index:05d}"
                    timeline.created[name] = time.perf_counter()
                    emulator.create(
                        SANDBOXES,
                        {
                            "apiVersion": "craft.onyx.app/v1alpha1",
                            "kind": "CraftSandbox",
                            "metadata": {"name": name, "namespace": NAMESPACE},
                            "spec": {"user": {"id": USER_ID}},
                        },
                    )
                    if index % 200 == 199:
                        await asyncio.sleep(0)  # let the server breathe during the burst
                try:
                    await asyncio.wait_for(timeline.done.wait(), timeout=max(120, n / 5))
                except TimeoutError:
                    log = (state / "operator.log").read_text(errors="replace")[-3000:]
                    raise SystemExit(
                        f"only {len(timeline.pods)} of {n} pods after the timeout; operator log:\n"
                        + log
                    ) from None
                await settle(emulator)
                provision_cpu = cpu_seconds(process) - idle_cpu
                if os.environ.get("BENCH_LOG"):
                    print((state / "operator.log").read_text(errors="replace")[-6000:])
                rss = process.memory_info().rss
                requests = operator_requests(emulator, before)
                writes = [r for r in requests if r.method.value.upper() in WRITE_METHODS]
                events = [w for w in writes if w.url.path.endswith("/events")]
            finally:
                if profiler is not None:
                    profiler.send_signal(signal.SIGINT)
                    await asyncio.to_thread(profiler.wait, 60)
                await stop(child, state)

            # A no-op resync: a fresh operator lists everything and reconciles every sandbox.
            before = len(emulator.served)
            child = start_operator(url, state, workers, keys)
            process = psutil.Process(child.pid)
            try:
                await settle(emulator, quiet=2.0, since=before)
                resync_cpu = cpu_seconds(process)
                resync_rss = process.memory_info().rss
                resync = operator_requests(emulator, before)
                resync_writes = [r for r in resync if r.method.value.upper() in WRITE_METHODS]
            finally:
                await stop(child, state)

    latencies = [timeline.pods[name] - timeline.created[name] for name in timeline.pods]
    span = max(timeline.pods.values()) - min(timeline.created.values())
    return {
        "n": n,
        "throughput": n / span,
        "p50_ms": percentile(latencies, 0.50) * 1000,
        "p99_ms": percentile(latencies, 0.99) * 1000,
        "reads": (len(requests) - len(writes)) / n,
        "writes": (len(writes) - len(events)) / n,
        "events": len(events) / n,
        "cpu_ms": provision_cpu / n * 1000,
        "rss_mib": rss / 2**20,
        "resync_writes": len(resync_writes),
        "resync_cpu_ms": resync_cpu / n * 1000,
        "resync_rss_mib": resync_rss / 2**20,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100,1000", help="comma-separated N values")
    parser.add_argument("--workers", type=int, default=16, help="CRAFT_WORKERS")
    args = parser.parse_args()
    sizes = [int(part) for part in args.sizes.split(",") if part]
    print(
        f"{'N':>6} {'sandbox/s':>10} {'p50 ms':>8} {'p99 ms':>8} {'reads':>6} {'writes':>7} "
        f"{'events':>7} {'CPU ms':>7} {'RSS MiB':>8} | {'resync writes':>13} {'CPU ms':>7} "
        f"{'RSS MiB':>8}"
    )
    for n in sizes:
        r = asyncio.run(run_size(n, args.workers))
        print(
            f"{r['n']:>6} {r['throughput']:>10.1f} {r['p50_ms']:>8.1f} {r['p99_ms']:>8.1f} "
            f"{r['reads']:>6.2f} {r['writes']:>7.2f} {r['events']:>7.2f} {r['cpu_ms']:>7.2f} "
            f"{r['rss_mib']:>8.1f} | {r['resync_writes']:>13} {r['resync_cpu_ms']:>7.2f} "
            f"{r['resync_rss_mib']:>8.1f}",
            flush=True,
        )
    print(
        "reads/writes/events are per sandbox, by the operator; CPU is the operator process's "
        "own (user+system) per sandbox; the resync is a restarted operator reconciling all."
    )


if __name__ == "__main__":
    main()
