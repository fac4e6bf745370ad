"""A throwaway PostgreSQL server for tests and benchmarks, as root or not.

``initdb`` refuses to run as root, and CI runs as root on a fresh machine, so as root the
server runs as the ``postgres`` OS user (created when missing) through ``runuser`` or
``setpriv``, with its data directory handed to that user. It listens on a free port on
127.0.0.1 with trust authentication and no durability (it is thrown away).
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import uuid
from pathlib import Path
from types import TracebackType

SERVICE_USER = "postgres"


class PostgresUnavailableError(Exception):
    """No throwaway server can be started here; the message says why."""


def find_bindir() -> Path | None:
    """The directory holding ``initdb``, ``pg_ctl`` and ``postgres``, or None."""
    candidates: list[Path] = []
    on_path = shutil.which("pg_ctl")
    if on_path:
        candidates.append(Path(on_path).resolve().parent)
    versions = sorted(
        glob.glob("/usr/lib/postgresql/*/bin"),
        key=lambda path: int(Path(path).parent.name) if Path(path).parent.name.isdigit() else 0,
        reverse=True,
    )
    candidates += [Path(path) for path in versions]
    for directory in candidates:
        if all((directory / tool).exists() for tool in ("initdb", "pg_ctl", "postgres")):
            return directory
    return None


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _traversable_by_others(path: Path) -> bool:
    """True when every directory down to ``path`` lets other users through (o+x)."""
    resolved = path.resolve()
    return all(directory.stat().st_mode & 0o001 for directory in (resolved, *resolved.parents))


def _service_account() -> pwd.struct_passwd:
    try:
        return pwd.getpwnam(SERVICE_USER)
    except KeyError:
        pass
    useradd = shutil.which("useradd")
    if useradd is None:
        raise PostgresUnavailableError(
            f"running as root and there is no {SERVICE_USER!r} user to run PostgreSQL as "
            "(and no useradd to create one)"
        )
    result = subprocess.run(  # noqa: S603 - fixed argv, no shell
        [useradd, "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", SERVICE_USER],
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        raise PostgresUnavailableError(
            f"cannot create the {SERVICE_USER!r} user: {result.stderr.strip()}"
        )
    return pwd.getpwnam(SERVICE_USER)


def _as_service_user(account: pwd.struct_passwd) -> list[str]:
    runuser = shutil.which("runuser")
    if runuser:
        return [runuser, "-u", account.pw_name, "--"]
    setpriv = shutil.which("setpriv")
    if setpriv:
        return [
            setpriv,
            f"--reuid={account.pw_uid}",
            f"--regid={account.pw_gid}",
            "--clear-groups",
            "--",
        ]
    raise PostgresUnavailableError("running as root and neither runuser nor setpriv exists")


class ThrowawayPostgres:
    """Start with ``with ThrowawayPostgres() as server:``; ``server.url()`` connects."""

    def __init__(self, *, bindir: Path | None = None) -> None:
        found = bindir or find_bindir()
        if found is None:
            raise PostgresUnavailableError(
                "no PostgreSQL server binaries (initdb, pg_ctl, postgres) were found; "
                "install the postgresql package"
            )
        self.bindir = found
        self.port = 0
        self.datadir: Path | None = None
        self._prefix: list[str] = []

    def url(self, database: str = "postgres") -> str:
        """A SQLAlchemy URL (psycopg driver) of a database on this server."""
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{database}"

    def _run(self, *argv: str) -> None:
        assert self.datadir is not None
        result = subprocess.run(  # noqa: S603 - our own argv, no shell
            [*self._prefix, *argv],
            cwd=self.datadir,
            env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C"},
            capture_output=True,
            text=True,
            check=False,
            timeout=120,
        )
        if result.returncode != 0:
            log_tail = ""
            logfile = self.datadir / "server.log"
            if logfile.exists():
                log_tail = logfile.read_text(errors="replace")[-2000:]
            raise PostgresUnavailableError(
                f"{Path(argv[0]).name} failed ({result.returncode}): "
                f"{(result.stderr or result.stdout).strip()[-2000:]}\n{log_tail}"
            )

    def start(self) -> ThrowawayPostgres:
        """Create a fresh cluster in a temporary directory and start the server."""
        parent = None
        if os.geteuid() == 0 and not _traversable_by_others(Path(tempfile.gettempdir())):
            parent = "/tmp"  # noqa: S108 - the service user must reach the data directory
        self.datadir = Path(tempfile.mkdtemp(prefix="craft-pg-", dir=parent))
        if os.geteuid() == 0:
            account = _service_account()
            self._prefix = _as_service_user(account)
            os.chown(self.datadir, account.pw_uid, account.pw_gid)
        self.port = _free_port()
        pgdata = str(self.datadir / "data")
        self._run(
            str(self.bindir / "initdb"),
            "-D",
            pgdata,
            "-U",
            "postgres",
            "--auth=trust",
            "--encoding=UTF8",
            "--no-locale",
            "--no-sync",
        )
        options = (
            f"-h 127.0.0.1 -p {self.port} -k {self.datadir} -c fsync=off "
            "-c synchronous_commit=off -c full_page_writes=off -c max_connections=200"
        )
        self._run(
            str(self.bindir / "pg_ctl"),
            "-D",
            pgdata,
            "-l",
            str(self.datadir / "server.log"),
            "-o",
            options,
            "-w",
            "-t",
            "60",
            "start",
        )
        return self

    def stop(self) -> None:
        """Stop the server and delete its files."""
        if self.datadir is None:
            return
        with contextlib.suppress(PostgresUnavailableError, subprocess.TimeoutExpired):
            self._run(
                str(self.bindir / "pg_ctl"),
                "-D",
                str(self.datadir / "data"),
                "-m",
                "immediate",
                "-w",
                "stop",
            )
        shutil.rmtree(self.datadir, ignore_errors=True)
        self.datadir = None

    def create_database(self, name: str | None = None) -> str:
        """Create an empty database and return its URL."""
        from sqlalchemy import create_engine, text

        name = name or f"t_{uuid.uuid4().hex[:12]}"
        engine = create_engine(self.url(), isolation_level="AUTOCOMMIT")
        try:
            with engine.connect() as connection:
                connection.execute(text(f'CREATE DATABASE "{name}"'))
        finally:
            engine.dispose()
        return self.url(name)

    def __enter__(self) -> ThrowawayPostgres:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()
