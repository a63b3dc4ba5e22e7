"""What a hostile tenant's task tries, run inside the task by the system's python3 with every
client library of the machine at hand (PYTHONPATH: the project's own site-packages). Each
attempt is one line of JSON on stdout: {"try": name, "got_in": bool, "said": what happened}; the
test (test_hostile_tenant.py) reads them through the API and asserts that none got in, while
the task's own work (its sandbox, its TMPDIR) succeeded.

What to aim at comes in the task's environment, as a tenant who read the docs and scanned the
machine would know it: T_HOME, T_FILES (JSON list), T_PG, T_ZK, T_KAFKA, T_CA, T_LOGS (JSON
list of agent log servers), T_VICTIM_TASK, T_VICTIM_SANDBOX, T_VICTIM_MARK (in the victim's
command line)."""

import ctypes
import json
import os
import signal
import socket
import urllib.error
import urllib.request

TARGET = os.environ


def say(name, got_in, said="", limit=400):
    print(json.dumps({"try": name, "got_in": bool(got_in), "said": str(said)[:limit]}), flush=True)


def attempt(name):
    def wrap(fn):
        try:
            got_in, said = fn()
        except Exception as exc:  # noqa: BLE001 - a refusal is what we hope for
            got_in, said = False, f"{type(exc).__name__}: {exc}"
        say(name, got_in, said)
        return fn
    return wrap


# -- what the task itself holds ------------------------------------------------------------------
say("environment", False, json.dumps(dict(os.environ)), limit=None)
cmdlines = []
for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmdlines.append(f.read().replace(b"\0", b" ").decode(errors="replace"))
    except OSError:
        pass
say("command lines", False, json.dumps(cmdlines), limit=None)


# -- the cluster's files ----------------------------------------------------------------------
for path in json.loads(TARGET["T_FILES"]):
    @attempt(f"read {path}")
    def _(path=path):
        with open(path, "rb") as f:
            return True, f.read(64)

for path in (TARGET["T_HOME"], os.path.join(TARGET["T_HOME"], "sandboxes"), os.path.join(TARGET["T_HOME"], "dev")):
    @attempt(f"list {path}")
    def _(path=path):
        return True, os.listdir(path)[:20]


# -- another job's processes and files -----------------------------------------------------------
victims = []
for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            if TARGET["T_VICTIM_MARK"].encode() in f.read():
                victims.append(int(pid))
    except OSError:
        pass
say("found the victim's processes", bool(victims), victims)  # by their command line: not an escape
for pid in victims:
    @attempt(f"read /proc/{pid}/environ")
    def _(pid=pid):
        with open(f"/proc/{pid}/environ", "rb") as f:
            return True, f.read(64)

    @attempt(f"ptrace {pid}")
    def _(pid=pid):
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.ptrace(16, pid, None, None) == 0:  # PTRACE_ATTACH
            libc.ptrace(17, pid, None, None)  # PTRACE_DETACH
            return True, "attached"
        return False, os.strerror(ctypes.get_errno())

    @attempt(f"kill -9 {pid}")
    def _(pid=pid):
        os.kill(pid, signal.SIGKILL)
        return True, "signalled"

for name in ("", "stdout"):
    @attempt(f"the victim's sandbox {name or 'listing'}")
    def _(name=name):
        path = os.path.join(TARGET["T_VICTIM_SANDBOX"], name)
        if name:
            with open(path, "rb") as f:
                return True, f.read(64)
        return True, os.listdir(path)


# -- the servers' ports ----------------------------------------------------------------------------
@attempt("PostgreSQL as postgres, no password")
def _():
    import psycopg

    psycopg.connect(f"postgresql://postgres@{TARGET['T_PG']}/postgres", connect_timeout=5).close()
    return True, "connected"


@attempt("PostgreSQL as postgres, password postgres")
def _():
    import psycopg

    psycopg.connect(f"postgresql://postgres:postgres@{TARGET['T_PG']}/postgres", connect_timeout=5).close()
    return True, "connected"


def zookeeper():
    from kazoo.client import KazooClient

    client = KazooClient(hosts=TARGET["T_ZK"], timeout=5)
    client.start(timeout=10)
    return client


@attempt("ZooKeeper: list /peloton")
def _():
    client = zookeeper()
    try:
        return True, client.get_children("/peloton")
    finally:
        client.stop()


@attempt("ZooKeeper: read an instance's node")
def _():
    client = zookeeper()
    try:
        return True, client.get("/peloton/instances")
    finally:
        client.stop()


@attempt("ZooKeeper: write under /peloton")
def _():
    client = zookeeper()
    try:
        client.create("/peloton/instances/agent/forged", b"{}")
        return True, "created"
    finally:
        client.stop()


@attempt("ZooKeeper: remove /peloton/instances")
def _():
    client = zookeeper()
    try:
        client.delete("/peloton/instances", recursive=True)
        return True, "removed"
    finally:
        client.stop()


for word in ("envi", "dump", "cons", "conf"):
    @attempt(f"ZooKeeper: four-letter word {word}")
    def _(word=word):
        host, port = TARGET["T_ZK"].rsplit(":", 1)
        with socket.create_connection((host, int(port)), timeout=5) as s:
            s.sendall(word.encode())
            answer = b""
            while chunk := s.recv(4096):
                answer += chunk
        text = answer.decode(errors="replace")
        return "is not executed because it is not in the whitelist" not in text and bool(text.strip()), text[:200]


def kafka(**config):
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": TARGET["T_KAFKA"], "message.timeout.ms": 8000, "log_level": 0,
                         **config})
    results = []
    producer.produce(f"{TARGET.get('T_PREFIX', '')}peloton.placements", b"forged",
                     on_delivery=lambda err, _m: results.append(err))
    producer.flush(10)
    return (bool(results) and results[0] is None), (results[0] if results else "no answer")


@attempt("Kafka: write placements with no credentials")
def _():
    return kafka()


for user, password in (("agent", "agent"), ("admin", "admin"), ("broker", "broker")):
    @attempt(f"Kafka: write placements as {user}/{password}")
    def _(user=user, password=password):
        return kafka(**{"security.protocol": "SASL_SSL", "sasl.mechanisms": "SCRAM-SHA-512", "sasl.username": user,
                        "sasl.password": password, "ssl.ca.location": TARGET["T_CA"]})


# -- the agents' log servers ----------------------------------------------------------------------
for url in json.loads(TARGET["T_LOGS"]):
    for header in (None, "Bearer guess", "Bearer eyJhbGciOiJub25lIn0.eyJzdWIiOiJ4In0."):
        @attempt(f"log server {url} with {header or 'no grant'}")
        def _(url=url, header=header):
            request = urllib.request.Request(f"{url}/v1/sandboxes/{TARGET['T_VICTIM_TASK']}/stdout",
                                             headers={"Authorization": header} if header else {})
            try:
                with urllib.request.urlopen(request, timeout=5) as answer:
                    return True, answer.read(64)
            except urllib.error.HTTPError as exc:
                return False, f"{exc.code} {exc.read()[:200]!r}"


# -- its own work ----------------------------------------------------------------------------------
with open("mine", "w") as f:
    f.write("my own file\n")
with open(os.path.join(os.environ["TMPDIR"], "scratch"), "w") as f:
    f.write("scratch\n")
with open(os.path.join(os.environ["HOME"], "mine")) as f:
    say("own work", False, f.read().strip())
