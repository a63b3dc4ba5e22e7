"""A throwaway PostgreSQL server on this machine, for the tests and `dev up --store postgres`.

Debian's `postgresql` package provides the binaries (/usr/lib/postgresql/<version>/bin). The
server refuses to run as root, so as root every command runs as the `postgres` user, on a
directory that user owns (0700). Password authentication (SCRAM-SHA-256) on its socket and on
127.0.0.1 alike, as an operator runs it: tasks share the machine, and trust would let any of them
in as the superuser. fsync off: the data is thrown away with the directory.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

INSTALL = "apt-get install -y postgresql"


class PostgresUnavailable(RuntimeError):
    pass


def bin_dir() -> Path:
    """The newest installed server's binaries."""
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"), key=lambda p: int(p.parts[-3]))
    if not found:
        raise PostgresUnavailable(f"PostgreSQL is not installed (no /usr/lib/postgresql/*/bin/pg_ctl); "
                                  f"install it with `{INSTALL}` (make test does when it runs as root)")
    return found[-1].parent


def _as_server_user(cmd: list[str]) -> list[str]:
    return ["runuser", "-u", "postgres", "--", *cmd] if os.geteuid() == 0 else cmd


@dataclass
class PostgresServer:
    dir: Path
    port: int
    options: str = ""  # the server's -o options, to start it again
    password: str = ""  # the superuser's (SCRAM)
    host: str = "127.0.0.1"  # where it listens (a network host's address: dev/netns.py)
    wrap: tuple[str, ...] = ()  # what its commands run inside (`ip netns exec NS`)

    @property
    def url(self) -> str:
        return self.url_of("postgres")

    def url_of(self, database: str) -> str:
        return f"postgresql://postgres:{self.password}@{self.host}:{self.port}/{database}"

    @property
    def pid(self) -> int:
        """The postmaster's pid (first line of postmaster.pid)."""
        try:
            return int((self.dir / "data" / "postmaster.pid").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return 0

    def create_database(self, prefix: str = "peloton") -> str:
        """A new empty database, owned by a role of its own (a password, no superuser, no other
        database); the URL that reaches it as that role."""
        import psycopg

        name = f"{prefix}_{uuid.uuid4().hex[:10]}"
        password = secrets.token_hex(16)
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute(f"CREATE ROLE \"{name}\" LOGIN PASSWORD '{password}' NOSUPERUSER NOCREATEDB NOCREATEROLE")
            conn.execute(f'CREATE DATABASE "{name}" OWNER "{name}"')
            conn.execute(f'REVOKE ALL ON DATABASE "{name}" FROM PUBLIC')
        return f"postgresql://{name}:{password}@{self.host}:{self.port}/{name}"

    def stop(self, keep: bool = False) -> None:
        """Stop the server; its directory goes too unless `keep` (then start() brings it back)."""
        subprocess.run([*self.wrap, *_as_server_user([str(bin_dir() / "pg_ctl"), "-D", str(self.dir / "data"), "-m",
                                                      "immediate", "stop"])], capture_output=True, timeout=60)
        if not keep:
            shutil.rmtree(self.dir, ignore_errors=True)

    def start(self, timeout: float = 60) -> None:
        """Start a server stopped with keep=True again, on its data."""
        started = subprocess.run([*self.wrap, *_as_server_user([
            str(bin_dir() / "pg_ctl"), "-D", str(self.dir / "data"), "-o", self.options, "-l",
            str(self.dir / "server.log"), "-w", "-t", str(int(timeout)), "start"])], capture_output=True, text=True,
                                 timeout=timeout + 10)
        if started.returncode:
            raise PostgresUnavailable(f"PostgreSQL did not start again: {started.stderr.strip()}")
        _wait_ready(self, timeout)


def start_postgres(port: int, parent: Path | None = None, timeout: float = 60, host: str = "127.0.0.1",
                   wrap: tuple[str, ...] = ()) -> PostgresServer:
    """initdb and start a server on host:port (127.0.0.1, or a network host's address with `wrap`
    the command that enters its namespace) in a new directory (under parent, or /tmp)."""
    bins = bin_dir()
    # The server user must reach the directory (not below a root-only pytest tmp dir), and no one
    # else: it holds the server's data, log and socket.
    base = Path(tempfile.mkdtemp(prefix="peloton-pg-", dir=parent))
    os.chmod(base, 0o700)
    if os.geteuid() == 0:
        shutil.chown(base, "postgres", "postgres")
    data = base / "data"
    run = lambda cmd: subprocess.run(_as_server_user(cmd), capture_output=True, text=True, timeout=timeout)  # noqa: E731
    password = secrets.token_hex(16)
    pwfile = base / "superuser-password"
    fd = os.open(pwfile, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(password + "\n")
    if os.geteuid() == 0:
        shutil.chown(pwfile, "postgres", "postgres")
    init = run([str(bins / "initdb"), "-A", "scram-sha-256", f"--pwfile={pwfile}", "-U", "postgres", "-E", "UTF8",
                "--no-sync", "-D", str(data)])
    pwfile.unlink()
    if init.returncode:
        raise PostgresUnavailable(f"initdb failed: {init.stderr.strip()[-500:]}")
    if host != "127.0.0.1":  # reached from other network hosts: with the password, as on loopback
        with open(data / "pg_hba.conf", "a") as hba:
            hba.write("host all all 0.0.0.0/0 scram-sha-256\n")
    options = f"-p {port} -k {base} -c listen_addresses={host} -c fsync=off -c full_page_writes=off"
    started = subprocess.run([*wrap, *_as_server_user([str(bins / "pg_ctl"), "-D", str(data), "-o", options, "-l",
                                                      str(base / "server.log"), "-w", "-t", str(int(timeout)),
                                                      "start"])], capture_output=True, text=True, timeout=timeout)
    if started.returncode:
        log = (base / "server.log").read_text(errors="replace")[-800:] if (base / "server.log").exists() else ""
        raise PostgresUnavailable(f"PostgreSQL did not start on port {port}: {started.stderr.strip()} {log}")
    server = PostgresServer(base, port, options, password, host, tuple(wrap))
    _wait_ready(server, timeout)
    return server


def _wait_ready(server: PostgresServer, timeout: float) -> None:
    import psycopg

    deadline = time.monotonic() + timeout
    while True:
        try:
            psycopg.connect(server.url, connect_timeout=2).close()
            return
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)
