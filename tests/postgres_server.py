"""A private PostgreSQL server for the test session, and the Debian packages it needs.

``make postgres-deps`` (a prerequisite of ``make test``) runs ``python3
tests/postgres_server.py install``: when PostgreSQL's server programs or its JDBC driver
(``/usr/share/java/postgresql.jar``, which Spark's JDBC reader loads) are missing, it
installs ``postgresql libpostgresql-jdbc-java`` with apt-get if it runs as root, and
otherwise says what to install (tests/debian_packages.py). Under ``CI=true`` anything
missing is an error: CI must run the PostgreSQL tests, never skip them. The module uses the
standard library only, so it runs before the project's virtual environment exists.

``PostgresServer.start()`` runs a server of its own for one test session: ``initdb`` into a
temporary folder, listening on 127.0.0.1 on a free port and on a socket in that folder, as
the ``postgres`` user when run as root (PostgreSQL refuses to run as root); ``stop()`` stops
it and removes the folder. It touches no cluster of the machine.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass

from debian_packages import ensure, in_ci, install_command, install_main

__all__ = ["JDBC_JAR", "PACKAGES", "PostgresServer", "ensure_installed", "how_to_install",
           "in_ci", "main", "missing", "server_bin_dir"]

PACKAGES = ("postgresql", "libpostgresql-jdbc-java")
JDBC_JAR = "/usr/share/java/postgresql.jar"


def server_bin_dir() -> str | None:
    """The folder of the newest installed PostgreSQL's ``initdb`` and ``pg_ctl``, if any."""
    found = glob.glob("/usr/lib/postgresql/*/bin/initdb")
    if found:
        newest = max(found, key=lambda p: int(p.split("/")[-3]) if p.split("/")[-3].isdigit()
                     else 0)
        return os.path.dirname(newest)
    initdb = shutil.which("initdb")
    return os.path.dirname(initdb) if initdb else None


def missing() -> list[str]:
    """The Debian packages whose files the PostgreSQL tests need and cannot find."""
    out = []
    if server_bin_dir() is None:
        out.append("postgresql")
    if not os.path.exists(JDBC_JAR):
        out.append("libpostgresql-jdbc-java")
    return out


def how_to_install(packages: list[str]) -> str:
    """The command that installs ``packages``, for messages."""
    return f"{install_command(packages)} (or: make postgres-deps)"


def ensure_installed() -> str | None:
    """Install what is missing when running as root; None when all is there, else why not.

    A non-root user gets the reason (with the command to run as root) instead.
    """
    return ensure("PostgreSQL tests", missing, PACKAGES, "postgres-deps")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class PostgresServer:
    """A PostgreSQL server of one test session (see the module's docstring)."""

    bin_dir: str
    root: str
    port: int
    user: str = "sparkcq"
    password: str = "sparkcq-test-pw"
    dbname: str = "sparkcq_test"
    run_as: tuple[int, int] | None = None  # uid, gid when started as root

    @property
    def data_dir(self) -> str:
        return os.path.join(self.root, "data")

    @property
    def socket_dir(self) -> str:
        return os.path.join(self.root, "sock")

    @property
    def url(self) -> str:
        """``postgresql://user:password@127.0.0.1:port/db`` of the test database."""
        return (f"postgresql://{self.user}:{self.password}@127.0.0.1:{self.port}/"
                f"{self.dbname}")

    def conninfo(self, dbname: str | None = None) -> str:
        """A libpq connection string (for psycopg) over TCP with the password."""
        return (f"host=127.0.0.1 port={self.port} user={self.user} "
                f"password={self.password} dbname={dbname or self.dbname}")

    def _run(self, *cmd: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        kwargs: dict[str, object] = {}
        if self.run_as is not None:
            kwargs = {"user": self.run_as[0], "group": self.run_as[1], "extra_groups": []}
        return subprocess.run(cmd, cwd=self.root, capture_output=True, text=True,
                              check=check, **kwargs)  # type: ignore[call-overload]

    @classmethod
    def start(cls) -> PostgresServer:
        """Create and start a private server with a database ``sparkcq_test``."""
        bin_dir = server_bin_dir()
        if bin_dir is None:
            msg = f"no PostgreSQL server programs; {how_to_install(list(PACKAGES))}"
            raise RuntimeError(msg)
        run_as = None
        if os.geteuid() == 0:
            try:
                entry = pwd.getpwnam("postgres")
            except KeyError:
                msg = ("PostgreSQL refuses to run as root and there is no 'postgres' user "
                       "to run it as (the postgresql package creates one)")
                raise RuntimeError(msg) from None
            run_as = (entry.pw_uid, entry.pw_gid)
        root = tempfile.mkdtemp(prefix="sparkcq-pg-")
        server = cls(bin_dir, root, 0, run_as=run_as)
        try:
            server._init()
            server._launch()
        except BaseException:
            server.stop()
            raise
        return server

    def _init(self) -> None:
        os.makedirs(self.socket_dir)
        pwfile = os.path.join(self.root, "pw")
        with open(pwfile, "w", encoding="utf-8") as f:
            f.write(self.password + "\n")
        if self.run_as is not None:
            for path in (self.root, self.socket_dir, pwfile):
                os.chown(path, *self.run_as)
        os.chmod(self.root, 0o700)
        self._run(os.path.join(self.bin_dir, "initdb"), "-D", self.data_dir, "-U", self.user,
                  f"--pwfile={pwfile}", "--auth-local=trust", "--auth-host=scram-sha-256",
                  "-E", "UTF8", "--locale=C", "--no-sync")

    def _launch(self) -> None:
        """Start on a free port (another port if that one was taken meanwhile)."""
        options = ("-c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off "
                   "-c full_page_writes=off -c shared_buffers=32MB -c max_connections=40 "
                   f"-k {self.socket_dir}")
        log = os.path.join(self.root, "server.log")
        for _attempt in range(3):
            self.port = _free_port()
            done = self._run(os.path.join(self.bin_dir, "pg_ctl"), "-D", self.data_dir,
                             "-l", log, "-w", "-t", "60", "-o", f"-p {self.port} {options}",
                             "start", check=False)
            if done.returncode == 0:
                break
            time.sleep(0.2)
        else:
            with open(log, encoding="utf-8", errors="replace") as f:
                tail = f.read()[-2000:]
            msg = f"PostgreSQL did not start: {done.stdout}{done.stderr}\n{tail}"
            raise RuntimeError(msg)
        self._run(os.path.join(self.bin_dir, "createdb"), "-h", self.socket_dir, "-p",
                  str(self.port), "-U", self.user, self.dbname)

    def stop(self) -> None:
        """Stop the server (fast shutdown) and remove its folder."""
        if os.path.exists(os.path.join(self.data_dir, "postmaster.pid")):
            self._run(os.path.join(self.bin_dir, "pg_ctl"), "-D", self.data_dir, "-m", "fast",
                      "-w", "stop", check=False)
        shutil.rmtree(self.root, ignore_errors=True)


def main(argv: list[str]) -> int:
    """``install``: install what is missing (as root), else say what to install."""
    return install_main(argv, "tests/postgres_server.py", "PostgreSQL tests", ensure_installed,
                        "PostgreSQL and its JDBC driver are installed")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
