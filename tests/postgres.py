"""A real PostgreSQL server for the test session, so the store runs its suites on both databases.

One server per session, started on first use in a temporary data directory on a free loopback
port, and stopped at the end. Each test gets its own database, cloned from a template that
already holds Berth's tables: cloning a small database is a file copy (milliseconds), where
creating the tables and indexes anew would cost each test a few hundred statements.

Debian installs the server binaries under /usr/lib/postgresql/<version>/bin, off PATH; `make test`
installs the package when they are missing. Without them the PostgreSQL runs fail, never skip:
a store change that breaks PostgreSQL must not pass unnoticed on a machine that lacks it.
"""

from __future__ import annotations

import glob
import itertools
import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
from sqlalchemy import Connection, create_engine, text
from sqlalchemy.pool import NullPool

from orchestrator.store import open_database

SUPERUSER = "berth"
TEMPLATE_DB = "berth_template"
# The server's data is thrown away at the end of the session: durability only costs time here.
SETTINGS = {
    "listen_addresses": "'127.0.0.1'",
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
    # Tests open several stores at once (workers racing on one row) and some are not closed until
    # their database is dropped: room beyond the default 100.
    "max_connections": "300",
}
DIR_PREFIX = "berth-pg-"
START_ATTEMPTS = 3  # a free port found by binding can be taken by someone else before the server binds it


def _server_bin_dir() -> Path | None:
    found = shutil.which("initdb")
    if found:
        return Path(found).resolve().parent
    versions = sorted(
        glob.glob("/usr/lib/postgresql/*/bin/initdb"),
        key=lambda p: int(Path(p).parent.parent.name) if Path(p).parent.parent.name.isdigit() else 0,
    )
    return Path(versions[-1]).parent if versions else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass(frozen=True)
class PostgresServer:
    port: int
    # PostgreSQL 15 copies a template through the WAL by default; copying its files is twice as fast
    # for a database this small (and its checkpoint costs nothing with fsync off).
    clone_strategy: str = ""

    def url(self, database: str) -> str:
        return f"postgresql+psycopg://{SUPERUSER}@127.0.0.1:{self.port}/{database}"

    def new_database(self, name: str) -> str:
        """A new database with Berth's tables and no rows (a clone of the template); its URL."""
        with _admin(self) as admin:
            admin.execute(text(f"CREATE DATABASE {name} TEMPLATE {TEMPLATE_DB}{self.clone_strategy}"))
        return self.url(name)


class _Cluster:
    """initdb, pg_ctl start/stop, run as the `postgres` user when we are root (initdb refuses root)."""

    def __init__(self, bin_dir: Path, directory: Path | None = None) -> None:
        self.bin_dir = bin_dir
        self.as_root = os.geteuid() == 0
        self.dir = directory or Path(tempfile.mkdtemp(prefix=DIR_PREFIX))
        self.data = self.dir / "data"
        self.log = self.dir / "server.log"
        self.running = directory is not None  # an existing directory: an abandoned session's server
        if directory is None:
            (self.dir / "session.pid").write_text(str(os.getpid()))
            if self.as_root:
                shutil.chown(self.dir, "postgres", "postgres")

    def run(self, *args: str) -> None:
        command = [str(self.bin_dir / args[0]), *args[1:]]
        if self.as_root:
            command = ["runuser", "-u", "postgres", "--", *command]
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0:
            log = self.log.read_text()[-3000:] if self.log.exists() else ""
            raise RuntimeError(f"{' '.join(command)} failed ({done.returncode}):\n{done.stdout}{done.stderr}{log}")

    def init(self) -> None:
        self.run(
            "initdb", "-D", str(self.data), "-U", SUPERUSER, "-A", "trust", "-E", "UTF8", "--locale=C", "--no-sync"
        )
        with open(self.data / "postgresql.conf", "a") as conf:
            conf.writelines(f"{name} = {value}\n" for name, value in SETTINGS.items())

    def start(self, port: int) -> None:
        # The unix socket goes into our own directory: the default one (/var/run/postgresql) may not exist.
        self.run(
            "pg_ctl",
            "-D",
            str(self.data),
            "-l",
            str(self.log),
            "-w",
            "-t",
            "60",
            "-o",
            f"-p {port} -k {self.dir}",
            "start",
        )
        self.running = True

    def stop(self) -> None:
        try:
            if self.running:  # else a failed init or start is the error to report, not this stop's
                self.run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop")
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)


def _stop_abandoned(bin_dir: Path) -> None:
    """Stop the servers of sessions that were killed before their teardown (a timeout's SIGTERM)."""
    for directory in Path(tempfile.gettempdir()).glob(f"{DIR_PREFIX}*"):
        try:
            os.kill(int((directory / "session.pid").read_text()), 0)
            continue  # its session still runs
        except ProcessLookupError:
            pass
        except (OSError, ValueError):
            continue  # not ours to judge: unreadable, or another user's session
        try:
            _Cluster(bin_dir, directory).stop()
        except RuntimeError:
            shutil.rmtree(directory, ignore_errors=True)


@contextmanager
def local_postgres() -> Iterator[PostgresServer]:
    """A PostgreSQL server of our own, with the template database, until the block ends (tests, benchmarks)."""
    bin_dir = _server_bin_dir()
    if bin_dir is None:
        raise RuntimeError(
            "PostgreSQL's server binaries (initdb, pg_ctl, postgres) are not on PATH nor under "
            "/usr/lib/postgresql/*/bin: run `make test`, which installs Debian's postgresql package"
        )
    _stop_abandoned(bin_dir)
    cluster = _Cluster(bin_dir)
    try:
        cluster.init()
        for attempt in range(1, START_ATTEMPTS + 1):
            port = _free_port()
            try:
                cluster.start(port)
                break
            except RuntimeError:
                if attempt == START_ATTEMPTS:
                    raise
        with _admin(PostgresServer(port)) as admin:
            admin.execute(text(f"CREATE DATABASE {TEMPLATE_DB} TEMPLATE template0"))
            version = int(admin.execute(text("SHOW server_version_num")).scalar_one())
        server = PostgresServer(port, " STRATEGY FILE_COPY" if version >= 150000 else "")
        open_database(server.url(TEMPLATE_DB)).dispose()  # the template holds the tables every clone starts with
        yield server
    finally:
        cluster.stop()


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    try:
        with local_postgres() as server:
            yield server
    except RuntimeError as exc:
        if "server binaries" in str(exc):
            pytest.fail(str(exc), pytrace=False)
        raise


_database_numbers = itertools.count(1)


@pytest.fixture
def postgres_url(postgres_server: PostgresServer) -> Iterator[str]:
    """The URL of a new database with Berth's tables and no rows, dropped after the test."""
    name = f"berth_test_{next(_database_numbers)}"
    yield postgres_server.new_database(name)
    with _admin(postgres_server) as admin:
        # FORCE: stores a test opened and never closed still hold connections to it.
        admin.execute(text(f"DROP DATABASE {name} WITH (FORCE)"))


@contextmanager
def _admin(server: PostgresServer) -> Iterator[Connection]:
    """An autocommit connection to the `postgres` database: CREATE/DROP DATABASE refuse a transaction."""
    engine = create_engine(server.url("postgres"), isolation_level="AUTOCOMMIT", poolclass=NullPool)
    try:
        with engine.connect() as conn:
            yield conn
    finally:
        engine.dispose()
