"""Load benchmark: N CraftSandboxes created at once, on the emulator or the real server.

``--server emulator`` (the default): KMock's indexed emulator runs in this process (with
the driver). ``--server real``: the control plane built from Kubernetes' Go modules, with
kwok's pods and the real exec path (see ``bench/real_cluster.py``). Either way the operator
runs as it does in production, ``craft-operator run``, in its own process, so its CPU time
and memory are its own and not the server's. Prints, per N and server:

- sandboxes provisioned per second (CR created -> its pod created) and p50/p99 latency;
- API reads and writes per sandbox (the operator's requests, counted by the server);
- the operator's CPU seconds per sandbox and its RSS: idle (watching, no sandbox yet), after
  provisioning, and the growth per sandbox in KiB;
- the watch cache's KiB per object (pods, sandboxes, and all the objects of a sandbox), the
  objects of the run put into the operator code's ``ObjectCache`` (``bench/cache_size.py``);
- with ``--baseline DIR`` (a worktree of older code, e.g. main's HEAD), every run twice, the
  old operator code and then this one, with the ratio new/old (same machine, same run);
- for a no-op resync of all of them (the operator restarted: it lists everything and
  reconciles each sandbox), write calls, and CPU per sandbox;
- with ``--steady-cycles``, the restarted operator's RSS once per resync interval while it
  keeps revisiting every sandbox (the interval is shortened so that a cycle of N sandboxes
  just fits; 6 cycles stand for 30 minutes at the default 300 s).

    .venv/bin/python bench/operator_load.py [--sizes 100,1000] [--workers 16] [--steady-cycles 6]
    .venv/bin/python bench/operator_load.py --server real,emulator --sizes 100,1000
    .venv/bin/python bench/operator_load.py --sizes 1000,10000 --steady-cycles 6   # issue 8
    .venv/bin/python bench/operator_load.py --server real,emulator --rate 75 --duration 600
    git worktree add /tmp/base main && .venv/bin/python bench/operator_load.py --baseline /tmp/base
    BENCH_PROFILE=/tmp/profile.txt ...   # also record the operator with py-spy (raw format)
    BENCH_PROFILE_RESYNC=/tmp/resync.txt ...   # the restarted operator's, to steady state
    BENCH_LOG=1 ...                      # print the end of the operator's log

Targets (issue 4): <= 3 ms operator CPU per provisioning, p99 < 250 ms at N=1000, <= 5
writes per provisioning, 0 writes on a no-op resync, RSS < 150 MiB at 10,000.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
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

from bench import cache_size
from bench.real_cluster import start_profiler, stop_profiler
from bench.restart import seconds_to_steady_state
from tests.integration.conftest import SANDBOXES, declare_craft_resources
from tests.support.emulator import (
    OPERATOR_AGENTS,
    WRITE_METHODS,
    KubeEmulator,
    declare_core_resources,
)
from tests.support.operator_process import kubeconfig
from tests.support.s3 import free_port
from tests.support.sandbox_namespace import provision_sandbox_namespaces

from craft_operator.credentials.keyring import generate_key_entry

NAMESPACE = "load"
#: The kinds of a sandbox's objects, by the cache's name, and the emulator's resource.
CACHED_KINDS = {
    "CraftSandbox": SANDBOXES,
    "Pod": "v1/pods",
    "Secret": "v1/secrets",
    "ConfigMap": "v1/configmaps",
}
#: A POST that writes nothing: counted as a read.
ACCESS_REVIEWS = "/selfsubjectaccessreviews"
USER_ID = "3f2b8c1e-9d4a-4e6b-8f0a-1c2d3e4f5a6b"


@dataclass
class Timeline:
    created: dict[str, float] = field(default_factory=dict)
    pods: dict[str, float] = field(default_factory=dict)
    done: asyncio.Event = field(default_factory=asyncio.Event)
    expected: int = 0


def start_operator(
    url: str,
    state: Path,
    workers: int,
    keys: str,
    *,
    resync_interval: float = 300.0,
    extra_env: dict[str, str] | None = None,
) -> subprocess.Popen[bytes]:
    """``craft-operator run`` against the emulator at ``url`` (``extra_env``: more settings)."""
    env = {
        **os.environ,
        "KUBECONFIG": str(kubeconfig(state / "kubeconfig", url)),
        "CRAFT_STATE_DIR": str(state),
        "CRAFT_SERVER_URL": "http://onyx.invalid:8080",
        "CRAFT_ENCRYPTION_KEYS": keys,
        "CRAFT_WORKERS": str(workers),
        "CRAFT_METRICS_PORT": "0",
        "CRAFT_RESYNC_INTERVAL": str(resync_interval),
        # No kubelet runs the pods here: without this, a large N outlasts the default
        # 180 s and the resync would report every sandbox ProvisioningTimedOut.
        "CRAFT_PROVISIONING_TIMEOUT": "86400",
        **(extra_env or {}),
    }
    binary = Path(sys.executable).parent / "craft-operator"
    return subprocess.Popen(
        [str(binary), "run", "--standalone", "-n", NAMESPACE],
        env=cache_size.operator_env(env),
        stdout=subprocess.DEVNULL,
        stderr=open(state / "operator.log", "ab"),
    )


@dataclass
class Traffic:
    """Requests counted as they arrive: at 10,000 sandboxes, keeping them all costs gigabytes."""

    total: int = 0
    reads: int = 0
    writes: int = 0
    events: int = 0
    watches: int = 0
    #: The last writes (method and path), for BENCH_WRITES=1.
    recent: collections.deque[str] = field(default_factory=lambda: collections.deque(maxlen=50))

    async def count(self, request: Any) -> None:
        self.total += 1
        if not request.headers.get("User-Agent", "").startswith(OPERATOR_AGENTS):
            return
        # The start-up access check asks (SelfSubjectAccessReview) and stores nothing.
        if request.method.value.upper() not in WRITE_METHODS or request.url.path.endswith(
            ACCESS_REVIEWS
        ):
            self.reads += 1
            self.watches += request.params.get("watch") == "true"
        elif request.url.path.endswith("/events"):
            self.events += 1
        else:
            self.writes += 1
            self.recent.append(f"{request.method.value.upper()} {request.url.path}")

    def snapshot(self) -> Traffic:
        return Traffic(self.total, self.reads, self.writes, self.events, self.watches)


async def settle(
    traffic: Traffic, quiet: float = 1.5, limit: float = 900, since: Traffic | None = None
) -> None:
    """Wait until the operator watches (after ``since``), then is quiet for a while."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + limit
    if since is not None:
        while traffic.watches == since.watches:
            if loop.time() > deadline:
                raise TimeoutError("the operator never started watching")
            await asyncio.sleep(0.1)
    seen, since_time = traffic.total, loop.time()
    while loop.time() < deadline:
        await asyncio.sleep(0.2)
        if traffic.total != seen:
            seen, since_time = traffic.total, loop.time()
        elif loop.time() - since_time > quiet:
            return
    raise TimeoutError("the operator did not settle")


async def cpu_quiet(
    process: psutil.Process, *, share: float = 0.05, quiet: float = 3.0, limit: float = 900
) -> None:
    """Wait until the operator uses under ``share`` of a core for ``quiet`` seconds.

    A no-op resync sends no request at all, so only the operator's CPU shows it working.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + limit
    last, since = cpu_seconds(process), loop.time()
    while loop.time() < deadline:
        await asyncio.sleep(0.5)
        now = cpu_seconds(process)
        if now - last > share * 0.5:
            since = loop.time()
        elif loop.time() - since > quiet:
            return
        last = now
    raise TimeoutError("the operator never went quiet")


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


async def sample_rss(process: psutil.Process, seconds: float, every: float) -> list[float]:
    """The operator's RSS in MiB every ``every`` seconds for ``seconds``."""
    samples = []
    loop = asyncio.get_running_loop()
    end = loop.time() + seconds
    while loop.time() < end:
        await asyncio.sleep(every)
        samples.append(process.memory_info().rss / 2**20)
    return samples


async def run_size(n: int, workers: int, steady_cycles: int) -> dict[str, Any]:
    timeline = Timeline(expected=n)
    traffic = Traffic()
    # One resync cycle must fit its interval: ~5 ms of operator CPU per sandbox, doubled.
    resync_interval = max(20.0, n * 0.01)
    async with KubeEmulator() as emulator, kmock.Server(emulator):
        declare_core_resources(emulator)
        declare_craft_resources(emulator)
        provision_sandbox_namespaces(emulator)
        emulator.keep_history = False
        emulator.keep_requests = os.environ.get("BENCH_KEEP") == "1"

        async def record_pod(request: Any) -> None:
            await traffic.count(request)
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
            started = traffic.snapshot()
            child = start_operator(url, state, workers, keys)
            process = psutil.Process(child.pid)
            profiler = start_profiler(child.pid)
            try:
                await settle(traffic, quiet=1.0, since=started)
                idle_rss = process.memory_info().rss
                idle_cpu = cpu_seconds(process)
                before = traffic.snapshot()
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
                await settle(traffic)
                provision_cpu = cpu_seconds(process) - idle_cpu
                if os.environ.get("BENCH_LOG"):
                    print((state / "operator.log").read_text(errors="replace")[-6000:])
                rss = process.memory_info().rss
                provisioning = traffic.snapshot()
                cached = cache_size.measure(
                    {
                        kind: emulator.list(resource, NAMESPACE)
                        for kind, resource in CACHED_KINDS.items()
                    },
                    state,
                )
            finally:
                await asyncio.to_thread(stop_profiler, profiler)
                await stop(child, state)

            # A no-op resync: a fresh operator lists everything and reconciles every sandbox.
            # It then stays up for the steady state: every sandbox revisited each interval.
            before_resync = traffic.snapshot()
            metrics_port = free_port()
            restarted = time.perf_counter()
            child = start_operator(
                url,
                state,
                workers,
                keys,
                resync_interval=resync_interval,
                extra_env={"CRAFT_METRICS_PORT": str(metrics_port)},
            )
            process = psutil.Process(child.pid)
            steady_state = asyncio.create_task(
                asyncio.to_thread(seconds_to_steady_state, metrics_port, n, restarted)
            )
            profiler = start_profiler(child.pid, "BENCH_PROFILE_RESYNC")
            try:
                while traffic.watches == before_resync.watches:  # noqa: ASYNC110 -- a counter
                    await asyncio.sleep(0.05)
                started_cpu = cpu_seconds(process)  # start-up (imports, kopf) is not the resync
                await settle(traffic, quiet=2.0, since=before_resync)
                await cpu_quiet(process)
                resync_cpu = cpu_seconds(process) - started_cpu
                resync_rss = process.memory_info().rss
                resync_writes = traffic.writes - before_resync.writes
                resync_s = await steady_state
                await asyncio.to_thread(stop_profiler, profiler)
                if os.environ.get("BENCH_WRITES") and resync_writes:
                    print("resync writes:", *list(traffic.recent)[-resync_writes:], sep="\n  ")
                steady: list[float] = []
                if steady_cycles:
                    steady = await sample_rss(
                        process, steady_cycles * resync_interval, resync_interval
                    )
            finally:
                await stop(child, state)

    latencies = [timeline.pods[name] - timeline.created[name] for name in timeline.pods]
    span = max(timeline.pods.values()) - min(timeline.created.values())
    reads = provisioning.reads - before.reads
    return {
        "n": n,
        "throughput": n / span,
        "p50_ms": percentile(latencies, 0.50) * 1000,
        "p99_ms": percentile(latencies, 0.99) * 1000,
        "reads": reads / n,
        "writes": (provisioning.writes - before.writes) / n,
        "events": (provisioning.events - before.events) / n,
        "cpu_ms": provision_cpu / n * 1000,
        "cpu_s": provision_cpu,
        "rss_mib": rss / 2**20,
        "idle_rss_mib": idle_rss / 2**20,
        "cache": cached,
        "resync_writes": resync_writes,
        "resync_cpu_ms": resync_cpu / n * 1000,
        "resync_rss_mib": resync_rss / 2**20,
        "resync_s": resync_s,
        "resync_interval": resync_interval,
        "steady": steady,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100,1000", help="comma-separated N values")
    parser.add_argument("--workers", type=int, default=16, help="CRAFT_WORKERS")
    parser.add_argument(
        "--server",
        default="emulator",
        help="comma-separated: emulator (KMock's, in this process) and/or real (the control "
        "plane built from Kubernetes' Go modules, with kwok pods and real exec)",
    )
    parser.add_argument(
        "--steady-cycles",
        type=int,
        default=0,
        help="emulator only: after the resync, keep the operator up this many resync "
        "intervals and sample its RSS once per interval (6 cycles = 30 minutes at 300 s)",
    )
    parser.add_argument(
        "--baseline",
        metavar="DIR",
        help="a worktree of the old code (e.g. `git worktree add /tmp/base main`): run each "
        "size with its operator first, then this tree's, and print the ratio new/old",
    )
    parser.add_argument(
        "--rate",
        type=float,
        default=0.0,
        help="instead of N at once: create sandboxes at this steady rate per second",
    )
    parser.add_argument(
        "--duration", type=float, default=600.0, help="with --rate: for this many seconds"
    )
    args = parser.parse_args()
    sizes = [int(part) for part in args.sizes.split(",") if part]
    servers = [part for part in args.server.split(",") if part]
    unknown = set(servers) - {"emulator", "real"}
    if unknown:
        parser.error(f"unknown --server {sorted(unknown)}")
    if args.rate:
        sustained(servers, args)
        return
    print(
        f"{'server':>8} {'N':>6} {'sandbox/s':>10} {'p50 ms':>8} {'p99 ms':>8} "
        f"{'Ready p50':>9} {'Ready p99':>9} {'reads':>6} {'writes':>7} {'events':>7} "
        f"{'execs':>6} {'CPU pod':>7} {'Ready':>7} {'CPU s':>7} {'RSS MiB':>8} | "
        f"{'resync writes':>13} {'CPU ms':>7} {'RSS MiB':>8} {'steady s':>8} | "
        f"{'idle MiB':>8} {'KiB/sbx':>7} "
        f"{'cache KiB: pod':>14} {'sbx':>5} {'all':>5} {'code':>4}",
        flush=True,
    )
    steady_lines, ratio_lines = [], []
    for n in sizes:
        for server in servers:
            runs = {}
            if args.baseline:
                os.environ[cache_size.OPERATOR_CODE] = str(Path(args.baseline) / "operator")
                try:
                    runs["old"] = run_one(server, n, args)
                finally:
                    del os.environ[cache_size.OPERATOR_CODE]
            runs["new"] = run_one(server, n, args)
            if "old" in runs:
                ratio_lines.append(ratio_line(server, n, runs["old"], runs["new"]))
            r = runs["new"]
            if r.get("steady"):
                first, last = r["steady"][0], r["steady"][-1]
                samples = " ".join(f"{value:.0f}" for value in r["steady"])
                growth = 100 * (last - first) / first
                steady_lines.append(
                    f"steady state N={n}: resync every {r['resync_interval']:.0f} s, RSS MiB "
                    f"per cycle {samples}; growth after the first cycle {growth:+.1f}%"
                )
    for line in ratio_lines:
        print(line)
    for line in steady_lines:
        print(line)
    print(
        "p50/p99: CR created -> its pod created; Ready p50/p99 (real server only): CR created "
        "-> phase Ready (kwok pod Running, onyx-cli validated through exec, empty library). "
        "reads/writes/events/execs are per sandbox, by the operator (emulator: counted by "
        "the server; real: the API server's audit log). CPU is the operator process's own "
        "(user+system) per sandbox: 'CPU pod' to pod created (on the real server an upper "
        "bound: the Ready work done until the last pod appeared counts too), 'Ready' to "
        "Ready; CPU s in total. The resync is a restarted operator reconciling all; steady "
        "s: from its start to every sandbox visited once with nothing due. idle MiB: the "
        "operator's RSS watching, before the first sandbox; KiB/sbx: its growth per sandbox "
        "to the end of provisioning; cache KiB: the watch cache per object (pods, sandboxes, "
        "and all the objects of the sandboxes). code: old (--baseline) or new (this tree)."
    )


def sustained(servers: list[str], args: argparse.Namespace) -> None:
    """The sustained-rate runs (``--rate``), one per server."""
    from bench.sustained_load import report, run_sustained_emulator, run_sustained_real

    for server in servers:
        if server == "real":
            result = run_sustained_real(args.rate, args.duration, args.workers)
        else:
            result = asyncio.run(run_sustained_emulator(args.rate, args.duration, args.workers))
        for line in report(server, result):
            print(line, flush=True)


def run_one(server: str, n: int, args: argparse.Namespace) -> dict[str, Any]:
    """One size on one server with the operator code the environment selects; its row."""
    if server == "real":
        from bench.real_cluster import run_size_real

        r = run_size_real(n, args.workers)
    else:
        r = asyncio.run(run_size(n, args.workers, args.steady_cycles))
    ready = (
        f"{r['ready_p50_ms']:>9.0f} {r['ready_p99_ms']:>9.0f}"
        if "ready_p50_ms" in r
        else f"{'-':>9} {'-':>9}"
    )
    execs = f"{r['execs']:>6.2f}" if "execs" in r else f"{'-':>6}"
    if "to_pod_cpu_ms" in r:
        cpu = f"{r['to_pod_cpu_ms']:>7.2f} {r['cpu_ms']:>7.2f}"
    else:
        cpu = f"{r['cpu_ms']:>7.2f} {'-':>7}"
    code = "old" if os.environ.get(cache_size.OPERATOR_CODE) else "new"
    per_sandbox = (r["rss_mib"] - r["idle_rss_mib"]) * 1024 / n
    cache = r["cache"]
    print(
        f"{server:>8} {r['n']:>6} {r['throughput']:>10.1f} {r['p50_ms']:>8.1f} "
        f"{r['p99_ms']:>8.1f} {ready} {r['reads']:>6.2f} {r['writes']:>7.2f} "
        f"{r['events']:>7.2f} {execs} {cpu} {r['cpu_s']:>7.1f} "
        f"{r['rss_mib']:>8.1f} | {r['resync_writes']:>13} {r['resync_cpu_ms']:>7.2f} "
        f"{r['resync_rss_mib']:>8.1f} {r['resync_s']:>8.1f} | {r['idle_rss_mib']:>8.1f} "
        f"{per_sandbox:>7.1f} "
        f"{cache.get('Pod', 0):>14.2f} {cache.get('CraftSandbox', 0):>5.2f} "
        f"{cache['all']:>5.2f} {code:>4}",
        flush=True,
    )
    return r


def ratio_line(server: str, n: int, old: dict[str, Any], new: dict[str, Any]) -> str:
    """New over old for the figures this work is about (below 1: the new code is leaner)."""

    def ratio(value: float, base: float) -> str:
        return f"{value / base:.2f}" if base else "-"

    figures = {
        "idle RSS": (new["idle_rss_mib"], old["idle_rss_mib"]),
        "RSS": (new["rss_mib"], old["rss_mib"]),
        "resync RSS": (new["resync_rss_mib"], old["resync_rss_mib"]),
        "cache KiB/pod": (new["cache"].get("Pod", 0), old["cache"].get("Pod", 0)),
        "cache KiB/object": (new["cache"]["all"], old["cache"]["all"]),
        "CPU ms": (new["cpu_ms"], old["cpu_ms"]),
        "writes": (new["writes"], old["writes"]),
    }
    parts = ", ".join(f"{name} {ratio(*pair)}" for name, pair in figures.items())
    return f"ratio new/old, {server} N={n}: {parts}"


if __name__ == "__main__":
    main()
