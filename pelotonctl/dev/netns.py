"""Hosts with network addresses of their own on one machine, for tests that cross a real network:
each host is a network namespace joined to one bridge by a veth pair, with its own address, so
its processes reach the others only through the bridge (and their own loopback). Faults are real
network faults: a host's link cut, slowed (tc tbf) or delayed (tc netem, where the kernel has
it), a one-way partition (a blackhole route on
the sending side), a host isolated from some peers. Needs root and iproute2; traffic goes only to
these addresses.

    hosts = NetworkHosts("pt1", subnet=78)          # bridge pt1-br, 10.78.0.1
    kafka = hosts.add("kafka-1")                     # namespace pt1-kafka-1 at 10.78.0.11
    proc = hosts.spawn("kafka-1", [...], env, log)   # a process inside it
    hosts.cut("kafka-1"); hosts.restore("kafka-1")
    hosts.throttle("agent-0", 512); hosts.unslow("agent-0")
    hosts.close()                                    # every namespace and the bridge go
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path


class NetworkError(RuntimeError):
    """A namespace, link or route could not be made; the message names the command."""


def _ip(*args: str) -> None:
    done = subprocess.run(["ip", *args], capture_output=True, text=True)
    if done.returncode:
        raise NetworkError(f"ip {' '.join(args)}: {done.stderr.strip()}")


def available() -> str | None:
    """Why network hosts cannot be made here, or None when they can."""
    import os

    if os.geteuid() != 0:
        return "network namespaces need root"
    if shutil.which("ip") is None or shutil.which("tc") is None:
        return "iproute2 (ip, tc) is not installed"
    return None


@dataclass
class Host:
    name: str
    namespace: str
    address: str
    veth: str  # the bridge's end of its link, in the root namespace


class NetworkHosts:
    def __init__(self, prefix: str, subnet: int = 78) -> None:
        self.prefix = prefix
        taken = subprocess.run(["ip", "-o", "-4", "addr"], capture_output=True, text=True).stdout
        while f" 10.{subnet}.0." in taken:  # another set of hosts has it (a test left running)
            subnet += 1
        self.subnet = subnet  # hosts are 10.<subnet>.0.<n>, the bridge .1
        self.bridge = f"{prefix}-br"
        self.hosts: dict[str, Host] = {}
        _ip("link", "add", self.bridge, "type", "bridge")
        _ip("addr", "add", f"10.{subnet}.0.1/24", "dev", self.bridge)
        _ip("link", "set", self.bridge, "up")

    @property
    def gateway(self) -> str:
        return f"10.{self.subnet}.0.1"

    def add(self, name: str) -> Host:
        n = len(self.hosts) + 11
        host = Host(name, f"{self.prefix}-{name}", f"10.{self.subnet}.0.{n}", f"{self.prefix}v{n}")
        _ip("netns", "add", host.namespace)
        _ip("link", "add", host.veth, "type", "veth", "peer", "name", "eth0", "netns", host.namespace)
        _ip("link", "set", host.veth, "master", self.bridge, "up")
        _ip("-n", host.namespace, "addr", "add", f"{host.address}/24", "dev", "eth0")
        _ip("-n", host.namespace, "link", "set", "eth0", "up")
        _ip("-n", host.namespace, "link", "set", "lo", "up")
        self.hosts[name] = host
        return host

    def address(self, name: str) -> str:
        return self.hosts[name].address

    def command(self, name: str, cmd: Sequence[str]) -> list[str]:
        """`cmd` as run inside the host's namespace."""
        return ["ip", "netns", "exec", self.hosts[name].namespace, *cmd]

    def spawn(self, name: str, cmd: Sequence[str], env: Mapping[str, str], log: Path) -> subprocess.Popen:
        """A process inside the host, in a session of its own, its output appended to `log`."""
        with open(log, "ab") as out:
            return subprocess.Popen(self.command(name, cmd), env=dict(env), stdout=out, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, start_new_session=True)

    # -- faults -----------------------------------------------------------------------------------
    def cut(self, name: str) -> None:
        """The host's link goes down: nothing in or out."""
        _ip("link", "set", self.hosts[name].veth, "down")

    def restore(self, name: str) -> None:
        _ip("link", "set", self.hosts[name].veth, "up")

    def delay(self, name: str, ms: int, jitter_ms: int = 0) -> None:
        """Every packet to the host waits `ms` (tc netem on the bridge's end of its link). Some
        kernels have no netem (sch_netem): then NetworkError says so, and throttle() is left."""
        spec = ["delay", f"{ms}ms", *([f"{jitter_ms}ms"] if jitter_ms else [])]
        self._qdisc(name, "netem", *spec)

    def throttle(self, name: str, kbit: int, latency_ms: int = 400) -> None:
        """The link to the host carries at most `kbit` kbit/s, a packet queued up to `latency_ms`
        (tc tbf, which every kernel here has): a slow, congested link."""
        self._qdisc(name, "tbf", "rate", f"{kbit}kbit", "burst", "16kbit", "latency", f"{latency_ms}ms")

    def unslow(self, name: str) -> None:
        """The host's link as it was: no delay, no limit."""
        subprocess.run(["tc", "qdisc", "del", "dev", self.hosts[name].veth, "root"], capture_output=True)

    def _qdisc(self, name: str, *spec: str) -> None:
        done = subprocess.run(["tc", "qdisc", "replace", "dev", self.hosts[name].veth, "root", *spec],
                              capture_output=True, text=True)
        if done.returncode:
            raise NetworkError(f"tc qdisc {spec[0]} on {name}: {done.stderr.strip()}")

    def drop(self, source: str, target: str) -> None:
        """A one-way partition: what `source` sends to `target` is dropped (a blackhole route in
        source's namespace); what target sends still arrives."""
        _ip("-n", self.hosts[source].namespace, "route", "add", "blackhole", f"{self.hosts[target].address}/32")

    def undrop(self, source: str, target: str) -> None:
        _ip("-n", self.hosts[source].namespace, "route", "del", "blackhole", f"{self.hosts[target].address}/32")

    def isolate(self, name: str, peers: Sequence[str]) -> None:
        """No traffic either way between the host and each of `peers`."""
        for peer in peers:
            self.drop(name, peer)
            self.drop(peer, name)

    def rejoin(self, name: str, peers: Sequence[str]) -> None:
        for peer in peers:
            self.undrop(name, peer)
            self.undrop(peer, name)

    def close(self) -> None:
        """Every namespace and the bridge go, and whatever still runs inside a namespace is
        killed first (stop what you started before, to let it end cleanly)."""
        import os
        import signal

        for host in self.hosts.values():
            pids = subprocess.run(["ip", "netns", "pids", host.namespace], capture_output=True, text=True).stdout
            for pid in pids.split():
                with contextlib.suppress(ProcessLookupError, ValueError):
                    os.kill(int(pid), signal.SIGKILL)
            subprocess.run(["ip", "link", "del", host.veth], capture_output=True)
            subprocess.run(["ip", "netns", "del", host.namespace], capture_output=True)
        subprocess.run(["ip", "link", "del", self.bridge], capture_output=True)
        self.hosts.clear()
