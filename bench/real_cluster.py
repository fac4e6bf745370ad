"""The load benchmark's run on the real control plane (``operator_load.py --server real``).

A control plane of its own (kube-apiserver, etcd, controllers, scheduler, kwok, built from
Kubernetes' Go modules), the CRDs and ``manifests/base`` applied, a restricted namespace,
the stand-in Onyx API on the operator's database, and ``craft-operator run`` as the
``craft-operator`` ServiceAccount. N CraftSandboxes are created at once; the driver
watches pods and sandboxes and takes the time each pod appears and each sandbox turns
Ready (onyx-cli validated through the real exec path, empty library). The operator's
requests are counted from the API server's audit log (every request of its
ServiceAccount), its CPU and memory from its own process.
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
from bench import cache_size
from bench.restart import seconds_to_steady_state
from tests.support.cluster import CRAFT, Cluster, audited_requests, controlplane_binaries
from tests.support.onyx_api import stand_in_onyx_api
from tests.support.s3 import free_port

from craft_operator.credentials.keyring import generate_key_entry
from craft_operator.devtools.controlplane import ControlPlane, Ports, default_onyx_cli

NAMESPACE = "load"
USER_ID = "3f2b8c1e-9d4a-4e6b-8f0a-1c2d3e4f5a6b"
READ_VERBS = {"get", "list", "watch"}
#: Resources whose POST asks a question and stores nothing (the start-up access check).
ASKING = {"selfsubjectaccessreviews", "selfsubjectrulesreviews"}
#: The kinds of a sandbox's objects, by the cache's name, and their API paths.
CACHED_KINDS = {
    "CraftSandbox": f"{CRAFT}/craftsandboxes",
    "Pod": "/api/v1/pods",
    "Secret": "/api/v1/secrets",
    "ConfigMap": "/api/v1/configmaps",
}


@dataclass
class Arrivals:
    """When each object was first seen in a state, by the driver's clock."""

    seen: dict[str, float] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def mark(self, name: str) -> None:
        with self.lock:
            self.seen.setdefault(name, time.perf_counter())


def watch(
    plane: ControlPlane, path: str, arrivals: Arrivals, wanted: Any, stop: threading.Event
) -> threading.Thread:
    """Stream ``path``'s watch events in a thread; mark the objects ``wanted(event)`` picks."""

    def run() -> None:
        context = plane.ssl_context()
        while not stop.is_set():
            request = urllib.request.Request(
                f"{plane.server}{path}?watch=true&allowWatchBookmarks=false&timeoutSeconds=60"
            )
            request.add_header("Authorization", f"Bearer {plane.admin_token()}")
            try:
                with urllib.request.urlopen(request, context=context, timeout=90) as stream:
                    for line in stream:
                        if stop.is_set():
                            return
                        event = json.loads(line)
                        if event.get("type") == "ERROR":
                            break  # e.g. the watch fell too far behind: watch again
                        if event.get("type") not in ("ADDED", "MODIFIED"):
                            continue
                        if wanted(event):
                            arrivals.mark(event["object"]["metadata"]["name"])
            except OSError:
                time.sleep(0.2)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def ready(event: dict[str, Any]) -> bool:
    """A CraftSandbox event showing phase Ready."""
    return ((event.get("object") or {}).get("status") or {}).get("phase") == "Ready"


def counted_as(event: dict[str, Any]) -> str:
    """What an audited request counts as: ``execs``, ``reads`` (a question asked, such as
    the start-up access check, included), ``events`` or ``writes``."""
    reference = event.get("objectRef", {})
    if reference.get("subresource") == "exec":
        return "execs"
    if event["verb"] in READ_VERBS or reference.get("resource") in ASKING:
        return "reads"
    if reference.get("resource") == "events":
        return "events"
    return "writes"


@dataclass
class Requests:
    """The operator's requests, from the audit log."""

    reads: int = 0
    writes: int = 0
    events: int = 0
    execs: int = 0

    @classmethod
    def of(cls, plane: ControlPlane) -> Requests:
        counted = cls()
        for event in audited_requests(plane):
            kind = counted_as(event)
            setattr(counted, kind, getattr(counted, kind) + 1)
        return counted

    def minus(self, other: Requests) -> Requests:
        return Requests(
            self.reads - other.reads,
            self.writes - other.writes,
            self.events - other.events,
            self.execs - other.execs,
        )


def start_profiler(pid: int, setting: str = "BENCH_PROFILE") -> subprocess.Popen[bytes] | None:
    """With ``BENCH_PROFILE=<file>`` (or the ``setting`` named), record process ``pid`` with
    py-spy (raw format)."""
    if not os.environ.get(setting):
        return None
    return subprocess.Popen(
        [
            str(Path(sys.executable).parent / "py-spy"),
            "record",
            "-p",
            str(pid),
            "-o",
            os.environ[setting],
            "-f",
            "raw",
            "-r",
            "200",
            # Only the thread holding the GIL: where the operator's CPU goes, not its
            # idle threads (py-spy counts some blocked pool workers as active).
            "--gil",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def stop_profiler(profiler: subprocess.Popen[bytes] | None) -> None:
    """Stop py-spy; it writes its profile as it exits."""
    if profiler is not None:
        profiler.send_signal(signal.SIGINT)
        profiler.wait(60)


def cpu_seconds(process: psutil.Process) -> float:
    times = process.cpu_times()
    return float(times.user + times.system)


#: How :func:`machine_cpu` names the processes of a benchmark's stack (the operator last:
#: the control plane's command lines hold its cache directory, ~/.cache/craft-operator).
PROCESS_GROUPS = {
    "kube-apiserver": "kube-apiserver",
    "etcd": "etcd",
    "kwok": "kwok",
    "podexec": "podexec (+ sh, tar, onyx-cli)",
    "kube-controller-manager": "controllers",
    "kube-scheduler": "controllers",
    "py-spy": "py-spy",
    "craft-operator": "operator",
}


def machine_cpu() -> dict[str, float]:
    """CPU seconds (user and system) of this benchmark and every process it started, by
    role; reaped children count for their parent (``podexec``'s ``sh``, ``tar`` and
    ``onyx-cli``). The benchmark's own process holds its driver, watches and moto's S3."""
    totals: dict[str, float] = collections.defaultdict(float)
    me = psutil.Process()
    for process in [me, *me.children(recursive=True)]:
        try:
            times = process.cpu_times()
            name = process.name()
            command = " ".join(process.cmdline()[:3])
        except psutil.Error:
            continue
        # By the executable's name first: the control plane's binaries live under
        # ~/.cache/craft-operator/, so their command lines name the operator too.
        group = next(
            (label for key, label in PROCESS_GROUPS.items() if key in name),
            next(
                (label for key, label in PROCESS_GROUPS.items() if key in command),
                "benchmark, moto S3" if process.pid == me.pid else "stand-in Onyx API, other",
            ),
        )
        totals[group] += times.user + times.system + times.children_user + times.children_system
    return dict(totals)


def machine_cpu_per(before: dict[str, float], after: dict[str, float], n: int) -> str:
    """One line: each role's CPU between two :func:`machine_cpu` readings, in ms per item."""
    spent = {key: after.get(key, 0.0) - before.get(key, 0.0) for key in after}
    total = sum(spent.values())
    parts = [
        f"{key} {value / n * 1000:.0f}"
        for key, value in sorted(spent.items(), key=lambda kv: -kv[1])
    ]
    return f"{total / n * 1000:.0f} ms per sandbox: " + ", ".join(parts)


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def wait_cpu_quiet(process: psutil.Process, *, share: float = 0.05, quiet: float = 3.0) -> None:
    """Until the process uses under ``share`` of a core for ``quiet`` seconds."""
    last, since = cpu_seconds(process), time.monotonic()
    deadline = time.monotonic() + 1800
    while time.monotonic() < deadline:
        time.sleep(0.5)
        now = cpu_seconds(process)
        if now - last > share * 0.5:
            since = time.monotonic()
        elif time.monotonic() - since > quiet:
            return
        last = now
    raise TimeoutError("the operator never went quiet")


class Stack:
    """The control plane, the Onyx API and the operator for one benchmark size."""

    def __init__(self, state: Path, workers: int) -> None:
        self.state = state
        self.workers = workers
        onyx_cli = default_onyx_cli()
        self.plane = ControlPlane(
            state / "controlplane", controlplane_binaries(), Ports.free(), onyx_cli
        )
        self.cluster = Cluster(self.plane)
        self.keys = generate_key_entry("bench").get_secret_value()
        self.operator_state = state / "operator"
        self.operator_state.mkdir(parents=True)
        self.onyx_api = contextlib.ExitStack()
        self.onyx_url = ""

    def __enter__(self) -> Stack:
        self.plane.up(timeout=120)
        self.cluster.install()
        self.cluster.sandbox_namespace(NAMESPACE)
        self.onyx_url = self.onyx_api.enter_context(
            stand_in_onyx_api(
                f"sqlite:///{self.operator_state / 'craft-operator.db'}",
                self.state / "onyx-api.log",
            )
        )
        self.kubeconfig = self.cluster.service_account_kubeconfig(
            self.state / "operator.kubeconfig"
        )
        return self

    def __exit__(self, *_: object) -> None:
        self.onyx_api.close()
        self.plane.down()

    def start_operator(
        self, *, resync_interval: float = 300.0, extra_env: dict[str, str] | None = None
    ) -> subprocess.Popen[bytes]:
        """``craft-operator run`` for the namespace, as the ServiceAccount (``extra_env``:
        more settings, e.g. the library's S3)."""
        env = {
            **os.environ,
            "KUBECONFIG": str(self.kubeconfig),
            "CRAFT_STATE_DIR": str(self.operator_state),
            "CRAFT_SERVER_URL": self.onyx_url,
            "CRAFT_ENCRYPTION_KEYS": self.keys,
            "CRAFT_WORKERS": str(self.workers),
            "CRAFT_METRICS_PORT": "0",
            "CRAFT_RESYNC_INTERVAL": str(resync_interval),
            "CRAFT_PROVISIONING_TIMEOUT": "86400",
            **(extra_env or {}),
        }
        binary = Path(sys.executable).parent / "craft-operator"
        with (self.state / "operator.log").open("ab") as log:
            return subprocess.Popen(
                [str(binary), "run", "--standalone", "-n", NAMESPACE],
                env=cache_size.operator_env(env),
                stdout=subprocess.DEVNULL,
                stderr=log,
            )

    def stop_operator(self, child: subprocess.Popen[bytes]) -> None:
        child.send_signal(signal.SIGTERM)
        try:
            child.wait(60)
        except subprocess.TimeoutExpired:
            child.kill()
            raise SystemExit("the operator ignored SIGTERM for 60 s") from None

    def log_tail(self) -> str:
        return (self.state / "operator.log").read_text(errors="replace")[-3000:]


def wait_for_operator(stack: Stack, process: psutil.Process) -> None:
    """Until the operator has listed the sandboxes (a watch is audited only when it ends)."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if any(
            event["verb"] == "list"
            and event.get("objectRef", {}).get("resource") == "craftsandboxes"
            for event in audited_requests(stack.plane)
        ):
            return
        if not process.is_running():
            raise SystemExit(f"the operator exited; its log:\n{stack.log_tail()}")
        time.sleep(0.2)
    raise SystemExit(f"the operator never listed the sandboxes; its log:\n{stack.log_tail()}")


def create_sandboxes(cluster: Cluster, n: int) -> dict[str, float]:
    """N CraftSandboxes, created as fast as 8 clients can; when each create returned."""

    def create(index: int) -> tuple[str, float]:
        name = f"sandbox-{index:05d}"
        cluster.create(
            f"{CRAFT}/craftsandboxes",
            NAMESPACE,
            {
                "apiVersion": "craft.onyx.app/v1alpha1",
                "kind": "CraftSandbox",
                "metadata": {"name": name},
                "spec": {"user": {"id": USER_ID}},
            },
        )
        return name, time.perf_counter()

    with ThreadPoolExecutor(max_workers=8) as pool:
        return dict(pool.map(create, range(n)))


def run_size_real(n: int, workers: int) -> dict[str, Any]:
    """One size on the real control plane; the same figures as the emulator's run."""
    with (
        tempfile.TemporaryDirectory(prefix="craft-bench-real-") as tmp,
        Stack(Path(tmp), workers) as stack,
    ):
        pods, sandboxes = Arrivals(), Arrivals()
        stop = threading.Event()
        watch(
            stack.plane,
            f"/api/v1/namespaces/{NAMESPACE}/pods",
            pods,
            lambda event: event["type"] == "ADDED",
            stop,
        )
        watch(stack.plane, f"{CRAFT}/namespaces/{NAMESPACE}/craftsandboxes", sandboxes, ready, stop)
        child = stack.start_operator()
        process = psutil.Process(child.pid)
        try:
            wait_for_operator(stack, process)
            wait_cpu_quiet(process, quiet=1.5)
            idle_rss = process.memory_info().rss
            idle_cpu = cpu_seconds(process)
            before = Requests.of(stack.plane)
            created = create_sandboxes(stack.cluster, n)
            deadline = time.monotonic() + max(300, n * 0.5)
            to_pod_cpu = None
            while len(sandboxes.seen) < n:
                if time.monotonic() > deadline:
                    raise SystemExit(
                        f"{len(pods.seen)} pods, {len(sandboxes.seen)} of {n} Ready after the "
                        f"timeout; operator log:\n{stack.log_tail()}"
                    )
                if to_pod_cpu is None and len(pods.seen) >= n:
                    # An upper bound: Ready work done meanwhile for earlier sandboxes counts.
                    to_pod_cpu = cpu_seconds(process) - idle_cpu
                time.sleep(0.05)
            wait_cpu_quiet(process)
            provision_cpu = cpu_seconds(process) - idle_cpu
            if os.environ.get("BENCH_LOG"):
                for name in ("operator.log", "onyx-api.log"):
                    text = (stack.state / name).read_text(errors="replace")
                    print(f"--- the end of {name}:\n{text[-6000:]}")
            rss = process.memory_info().rss
            provisioning = Requests.of(stack.plane).minus(before)
            objects = {
                kind: stack.cluster.list(path, NAMESPACE) for kind, path in CACHED_KINDS.items()
            }
            cached = cache_size.measure(objects, stack.state)
        finally:
            stack.stop_operator(child)

        # A no-op resync: a fresh operator lists everything and reconciles every sandbox.
        before_resync = Requests.of(stack.plane)
        metrics_port = free_port()
        restarted = time.perf_counter()
        child = stack.start_operator(extra_env={"CRAFT_METRICS_PORT": str(metrics_port)})
        process = psutil.Process(child.pid)
        steady = ThreadPoolExecutor(max_workers=1).submit(
            seconds_to_steady_state, metrics_port, n, restarted
        )
        try:
            started = time.monotonic()
            while Requests.of(stack.plane).minus(before_resync).reads < 3:
                if time.monotonic() - started > 120:
                    raise SystemExit("the restarted operator never listed")
                time.sleep(0.1)
            resync_started_cpu = cpu_seconds(process)
            wait_cpu_quiet(process)
            resync_cpu = cpu_seconds(process) - resync_started_cpu
            resync_rss = process.memory_info().rss
            resync = Requests.of(stack.plane).minus(before_resync)
            resync_s = steady.result()
        finally:
            stack.stop_operator(child)
            stop.set()

    to_pod = [pods.seen[name] - created[name] for name in created if name in pods.seen]
    to_ready = [sandboxes.seen[name] - created[name] for name in created]
    span = max(pods.seen.values()) - min(created.values())
    return {
        "n": n,
        "throughput": n / span,
        "p50_ms": percentile(to_pod, 0.50) * 1000,
        "p99_ms": percentile(to_pod, 0.99) * 1000,
        "ready_p50_ms": percentile(to_ready, 0.50) * 1000,
        "ready_p99_ms": percentile(to_ready, 0.99) * 1000,
        "reads": provisioning.reads / n,
        "writes": provisioning.writes / n,
        "events": provisioning.events / n,
        "execs": provisioning.execs / n,
        "cpu_ms": provision_cpu / n * 1000,
        "cpu_s": provision_cpu,
        "rss_mib": rss / 2**20,
        "idle_rss_mib": idle_rss / 2**20,
        "cache": cached,
        "resync_writes": resync.writes,
        "resync_cpu_ms": resync_cpu / n * 1000,
        "resync_rss_mib": resync_rss / 2**20,
        "resync_s": resync_s,
        "to_pod_cpu_ms": (to_pod_cpu if to_pod_cpu is not None else provision_cpu) / n * 1000,
    }
