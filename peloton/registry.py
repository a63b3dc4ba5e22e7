"""The instance registry: every stage instance (and later every host agent) keeps an ephemeral
ZooKeeper node saying where it runs, so any machine can list the cluster's processes.

    <root>/instances/<kind>/<instance_id>   ephemeral, JSON: kind, instance_id, host, pid,
                                            started_ms, and the instance's info (e.g. "metrics":
                                            "host:port", "group", "partitions")
    <root>/locks/<name>                     kazoo Lock recipe, for what must happen once

The address is a ZooKeeper connection string, "zk1:2181,zk2:2181", optionally ending in a chroot
path ("zk1:2181/prod") under which the root lives; PELOTON_ZOOKEEPER names it.

With credentials (PELOTON_ZOOKEEPER_AUTH, "user:password") every node made gets a digest ACL of
that user alone: a client without them (a task on the machine) can neither read, change nor
remove the cluster's nodes. ZooKeeper keeps the credentials' hash, never the password.

A stage calls `start()` once (the only call that raises when ZooKeeper is away), `register()` at
start, `update()` as often as it likes (when its partitions change), and `close()` on the way
out. `register`, `update` and `close` never raise because of ZooKeeper and `update` returns in
microseconds: one background thread writes the node, retries while ZooKeeper is away, and
creates it again when the session was lost (the server dropped the ephemeral node), including
after a ZooKeeper that restarted empty. A warning is logged once per outage. `instances()` and
`lock()` are for tools and one-off coordination: they wait for answers and raise
`RegistryUnavailable` when ZooKeeper does not give one.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Self

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import KazooException, LockTimeout, NodeExistsError, NoNodeError
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.security import make_digest_acl

log = logging.getLogger("peloton.registry")
# kazoo logs every failed reconnect at WARNING; the registry says it once per outage instead.
_kazoo_log = logging.getLogger("peloton.registry.kazoo")
_kazoo_log.setLevel(logging.ERROR)

ENV_VAR = "PELOTON_ZOOKEEPER"


class RegistryUnavailable(RuntimeError):
    """ZooKeeper did not answer; the message names the address and PELOTON_ZOOKEEPER."""


class LockNotAcquired(TimeoutError):
    """Another holder kept a cluster lock for longer than the caller would wait."""


def now_ms() -> int:
    return int(time.time() * 1000)


def split_chroot(hosts: str) -> tuple[str, str]:
    """("zk1:2181,zk2:2181", "/prod") from "zk1:2181,zk2:2181/prod"; the chroot is "" when absent."""
    hosts = hosts.strip()
    if "/" not in hosts:
        return hosts, ""
    servers, chroot = hosts.split("/", 1)
    chroot = chroot.strip("/")
    return servers, ("/" + chroot) if chroot else ""


def _check_name(what: str, value: str) -> str:
    if not value or "/" in value or value in (".", "..") or any(ord(c) < 32 for c in value):
        raise ValueError(f"{what} {value!r}: must be non-empty, without '/' or control characters")
    return value


class Registry:
    def __init__(self, hosts: str, root: str = "/peloton", timeout: float = 10.0, auth: str = ""):
        self.hosts = hosts
        self._auth = auth  # "user:password": every node made is that user's alone
        servers, chroot = split_chroot(hosts)
        # A chroot in the address is handled here rather than by kazoo, so that it is created on
        # first use like every other path.
        self.root = (chroot + "/" + root.strip("/")) if root.strip("/") else (chroot or "/")
        self.timeout = timeout
        self._servers = servers
        self._client: KazooClient | None = None
        # What this instance's node should hold, and what the writer last wrote, in which session.
        self._mutex = threading.Lock()
        self._path: str | None = None
        self._record: dict = {}
        self._data: bytes = b""
        self._written: bytes | None = None
        self._owner: int | None = None  # session id that owns our node as far as we know
        self._wake = threading.Event()
        self._first_write = threading.Event()
        self._closed = False
        self._keeper: threading.Thread | None = None
        self._outage = False  # a warning was logged and nothing has succeeded since
        self._down_since: float | None = None  # monotonic time the connection was lost

    # -- connection ------------------------------------------------------------------------------
    def _unavailable(self, reason: str) -> RegistryUnavailable:
        return RegistryUnavailable(f"ZooKeeper at {self.hosts} ({ENV_VAR}) is unavailable: {reason}")

    def start(self) -> Self:
        """Connect within `timeout` seconds, or raise RegistryUnavailable."""
        if self._client is not None:
            return self
        try:
            secured = {}
            if self._auth:
                user, sep, password = self._auth.partition(":")
                if not sep or not user:
                    raise ValueError("PELOTON_ZOOKEEPER_AUTH must be user:password")
                secured = {"auth_data": [("digest", self._auth)],
                           "default_acl": [make_digest_acl(user, password, all=True)]}
            client = KazooClient(
                hosts=self._servers, timeout=self.timeout, logger=_kazoo_log, **secured,
                # Reconnect for ever, never waiting more than 2 s between tries (kazoo's default
                # backoff grows to an hour).
                connection_retry={"max_tries": -1, "delay": 0.1, "backoff": 2, "max_delay": 2.0},
                command_retry={"max_tries": 3, "delay": 0.1, "backoff": 2, "max_delay": 1.0},
            )
        except (ValueError, KazooException) as exc:
            raise self._unavailable(f"not a ZooKeeper address ({exc})") from None
        try:
            client.start(timeout=self.timeout)
        except KazooTimeoutError:
            raise self._unavailable(f"no connection within {self.timeout:g}s") from None
        client.add_listener(self._on_state)
        self._client = client
        self._keeper = threading.Thread(target=self._keep, name="registry-keeper", daemon=True)
        self._keeper.start()
        return self

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def connected(self) -> bool:
        return self._client is not None and self._client.connected

    def _session(self) -> int | None:
        client_id = self._client.client_id if self._client is not None else None
        return client_id[0] if client_id else None

    def _on_state(self, state: str) -> None:
        # Runs on kazoo's connection thread: note and wake, never block.
        if self._closed:
            return
        if state != KazooState.CONNECTED and self._down_since is None:
            self._down_since = time.monotonic()
            self._wake.set()
        if state == KazooState.SUSPENDED:
            self._warn(f"ZooKeeper at {self.hosts} is unreachable; trying again"
                       + (f" ({self._path} stays registered while the session lasts)" if self._path else ""))
        elif state == KazooState.LOST:
            self._warn(f"ZooKeeper session with {self.hosts} was lost"
                       + (f"; {self._path} is registered again once reconnected" if self._path else ""))
        elif state == KazooState.CONNECTED:
            self._down_since = None
            if self._outage:
                log.info("ZooKeeper at %s is reachable again", self.hosts)
                self._outage = False
            self._wake.set()

    def _warn(self, message: str) -> None:
        if not self._outage:
            self._outage = True
            log.warning(message)

    # -- this instance's node ------------------------------------------------------------------
    def register(self, kind: str, instance_id: str, info: dict) -> str:
        """Create this instance's ephemeral node (taking over one left by an earlier run of the
        same instance) and return its path. Waits up to `timeout` for the first write; if
        ZooKeeper is away the node is written when it is back."""
        if self._client is None:
            raise RuntimeError("Registry.register() before start()")
        kind, instance_id = _check_name("kind", kind), _check_name("instance id", instance_id)
        path = f"{self.root.rstrip('/')}/instances/{kind}/{instance_id}"
        with self._mutex:
            if self._path not in (None, path):
                raise RuntimeError(f"this Registry already registered {self._path}; use one Registry per instance")
            self._path = path
            self._record = {"kind": kind, "instance_id": instance_id, "host": socket.gethostname(),
                            "pid": os.getpid(), "started_ms": now_ms(), **info}
            self._data = _encode(self._record)
        self._wake.set()
        if not self._first_write.wait(self.timeout):
            log.warning("%s is not registered in ZooKeeper at %s yet; it will be when ZooKeeper answers",
                        path, self.hosts)
        return path

    def update(self, info: dict) -> None:
        """Merge `info` into this instance's node (a key set to None is kept as null). Returns at
        once and never raises; an unchanged node is not written again."""
        with self._mutex:
            if self._path is None:
                return
            record = {**self._record, **info}
            if record == self._record:
                return
            self._record = record
            self._data = _encode(record)
        self._wake.set()

    def _keep(self) -> None:
        """The keeper thread: writes this instance's node whenever it is woken (by update(), or
        by a reconnect), retrying with backoff while ZooKeeper is away."""
        retry_in, backoff = None, 0.2
        while True:
            wait = retry_in
            if self._down_since is not None:
                wait = 1.0 if wait is None else min(wait, 1.0)
            self._wake.wait(wait)
            self._wake.clear()
            if self._closed:
                return
            self._drop_stale_view()
            if self._path is None:
                continue
            try:
                done = self._write_once()
            except Exception as exc:  # ZooKeeper away or session lost mid-write: try again
                self._warn(f"cannot write {self._path} to ZooKeeper at {self.hosts} ({exc!r}); trying again")
                done = False
            if done:
                retry_in, backoff = None, 0.2
            else:
                retry_in, backoff = backoff, min(backoff * 2, 5.0)

    def _drop_stale_view(self) -> None:
        """A ZooKeeper that lost its data (a wiped standalone server) refuses every client that
        saw a later transaction than it has, for ever. Once the connection has been down for
        longer than any session could outlive, our session is gone anyway, so forget the last
        transaction seen: the server then answers "session expired" and a fresh session (and
        node) follows, as for a brand-new client."""
        since = self._down_since
        client = self._client
        if since is None or client is None or not client.last_zxid:
            return
        # (Early is harmless: a server that still knows the session resumes it whatever the client saw.)
        if time.monotonic() - since > 1.5 * self.timeout:
            log.warning("no connection to ZooKeeper at %s for %.0fs; trying again as a new session "
                        "(a ZooKeeper that lost its data refuses the old one)", self.hosts, time.monotonic() - since)
            client.last_zxid = 0
            self._down_since = time.monotonic()

    def _write_once(self) -> bool:
        """Bring our node to what `_data` says; False when it must be tried again."""
        client, session = self._client, self._session()
        if client is None or session is None:  # the connection listener wakes us when connected
            return True
        with self._mutex:
            path, data = self._path, self._data
        if path is None:  # nothing registered yet
            return True
        if self._owner != session:
            self._create(client, path, data, session)
        elif data != self._written:
            try:
                stat = client.set(path, data)
            except NoNodeError:  # deleted behind our back: create it again
                self._owner = None
                return False
            if stat.ephemeralOwner != session:
                log.warning("%s now belongs to another ZooKeeper session (another process registered as this "
                            "instance); taking it back", path)
                self._owner = None
                return False
        else:
            return True
        self._written = data
        self._first_write.set()
        if self._outage:
            log.info("%s is registered in ZooKeeper at %s again", path, self.hosts)
            self._outage = False
        return True

    def _create(self, client: KazooClient, path: str, data: bytes, session: int) -> None:
        for _ in range(5):
            try:
                _, stat = client.create(path, data, ephemeral=True, makepath=True, include_data=True)
                self._owner = stat.ephemeralOwner
                return
            except NodeExistsError:
                pass
            try:
                _, stat = client.get(path)
            except NoNodeError:
                continue
            if stat.ephemeralOwner == session:  # ours already (a create whose answer was lost)
                client.set(path, data)
                self._owner = session
                return
            # A node from an earlier run of this instance whose session has not expired yet.
            log.info("%s: taking over the node of ZooKeeper session %#x", path, stat.ephemeralOwner)
            tx = client.transaction()
            tx.delete(path, version=stat.version)
            tx.create(path, data, ephemeral=True)
            results = tx.commit()
            if not any(isinstance(r, Exception) for r in results):
                self._owner = session
                return
        raise RuntimeError(f"{path} keeps changing under us")

    def close(self) -> None:
        """Remove this instance's node and stop the client. Never raises because of ZooKeeper."""
        if self._closed:
            return
        self._closed = True
        self._wake.set()
        if self._keeper is not None:
            self._keeper.join(1.0)
        client = self._client
        if client is None:
            return
        try:
            if self._path and self._owner is not None and self._owner == self._session():
                client.delete_async(self._path).get(timeout=min(self.timeout, 2.0))
        except Exception as exc:  # the session's end removes it anyway
            log.debug("deleting %s: %r", self._path, exc)
        try:
            client.stop()  # fails whatever the keeper still waits for, so it ends
            client.close()
        except Exception as exc:
            log.debug("stopping the ZooKeeper client: %r", exc)
        if self._keeper is not None:
            self._keeper.join(1.0)

    # -- reading -------------------------------------------------------------------------------
    def _get(self, async_result: Any) -> Any:
        try:
            return async_result.get(timeout=self.timeout)
        except KazooTimeoutError:
            raise self._unavailable(f"no answer within {self.timeout:g}s") from None

    def instances(self, kind: str | None = None) -> list[dict]:
        """Every registered instance (of `kind`, or of every kind) as its node's JSON with kind
        and instance_id, sorted by kind then instance id. Raises RegistryUnavailable."""
        client = self._require_client()
        base = f"{self.root.rstrip('/')}/instances"
        try:
            if kind is not None:
                kinds = [_check_name("kind", kind)]
            else:
                try:
                    kinds = self._get(client.get_children_async(base))
                except NoNodeError:
                    return []
            listings = {k: client.get_children_async(f"{base}/{k}") for k in kinds}
            reads = {}
            for k, listing in listings.items():
                try:
                    children = self._get(listing)
                except NoNodeError:
                    continue
                for child in children:
                    reads[(k, child)] = client.get_async(f"{base}/{k}/{child}")
            found = []
            for (k, child), read in sorted(reads.items()):
                try:
                    data, stat = self._get(read)
                except NoNodeError:  # went away since the listing
                    continue
                try:
                    record = json.loads(data)
                    if not isinstance(record, dict):
                        raise ValueError("not a JSON object")
                except ValueError as exc:
                    record = {"error": f"unreadable registry node: {exc}"}
                found.append({**record, "kind": k, "instance_id": child, "updated_ms": stat.mtime})
            return found
        except KazooException as exc:
            raise self._unavailable(repr(exc)) from None

    def _require_client(self) -> KazooClient:
        if self._client is None:
            raise RuntimeError("Registry used before start()")
        return self._client

    # -- cluster-wide locks ----------------------------------------------------------------------
    @contextmanager
    def lock(self, name: str, timeout: float | None = 30.0) -> Iterator[None]:
        """Hold the cluster-wide lock `name` (kazoo's Lock recipe under <root>/locks/<name>) for
        the `with` block. Raises LockNotAcquired when another holder keeps it for longer than
        `timeout` seconds (None waits for ever), RegistryUnavailable when ZooKeeper is away. The
        lock is lost with this client's session, as any ZooKeeper lock is."""
        client = self._require_client()
        path = f"{self.root.rstrip('/')}/locks/{_check_name('lock name', name)}"
        lk = client.Lock(path, identifier=f"{socket.gethostname()}:{os.getpid()}")
        try:
            acquired = lk.acquire(timeout=timeout)
        except LockTimeout:
            acquired = False
        except KazooException as exc:
            raise self._unavailable(f"cannot take lock {name!r}: {exc!r}") from None
        if not acquired:
            try:
                holders = ", ".join(lk.contenders()) or "unknown"
            except KazooException:
                holders = "unknown"
            raise LockNotAcquired(f"lock {name!r} ({path} in ZooKeeper at {self.hosts}) was not acquired "
                                  f"within {timeout or 0:g}s; held or awaited by {holders}")
        try:
            yield
        finally:
            self._release(lk)

    def _release(self, lk: Any) -> None:
        # Releasing waits for ZooKeeper; while it is away the release finishes in the background
        # when it is back (or the session's end frees the lock).
        def release() -> None:
            try:
                lk.release()
            except Exception as exc:
                log.warning("releasing lock %s: %r (it is freed when this session ends)", lk.path, exc)

        t = threading.Thread(target=release, name="registry-unlock", daemon=True)
        t.start()
        t.join(self.timeout)


def join(hosts: str, kind: str, instance_id: str, info: dict, auth: str = "") -> Registry | None:
    """Register this process (a stage instance or an agent) in ZooKeeper when one is configured.
    The registry is for operators, not for the work: one that cannot be reached is logged, not fatal."""
    if not hosts:
        return None
    registry = Registry(hosts, auth=auth)
    try:
        registry.start()
    except RegistryUnavailable as exc:
        log.warning("not in the instance registry: %s", exc)
        return None
    registry.register(kind, instance_id, info)
    return registry


def _encode(record: dict) -> bytes:
    return json.dumps(record, sort_keys=True, default=str).encode()
