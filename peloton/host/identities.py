"""One identity per job on a host: each job's runs (and their health checks) run under a uid and gid
of their own, taken from a range the agents of the machine are given (PELOTON_TASK_UIDS), as
systemd's DynamicUser takes one per service. Runs of other jobs are other users: none can signal,
ptrace or read another job's processes, nor enter its sandbox (0700, the job's own).

The allotment belongs to the machine, not to one agent: every agent of the machine (the dev stack
runs several, and two stacks may share a machine) takes its uids from one file, under a lock:

    /var/lib/peloton/identities.json   {"held": {job: {"uid": U, "used": t, "roots": [sandbox roots]}},
    (PELOTON_IDENTITIES_DIR)            "released": {U: [job, t]}, "fresh": next never-used uid}

A job keeps its uid while it has a run here (a process of that uid) and for LINGER_S after its
last take, so a job whose runs come and go keeps one identity. Then it is released: its sandboxes
(the run's files, its stdout and stderr) become root's, still served to the API by the agent. A
released uid is given again, oldest release first and never-used ones before any, only once
nothing of its last owner is left on the host: no process runs as it and no file or IPC object
of it is left where any user may write (/tmp, /var/tmp, /dev/shm, System V IPC).
"""

from __future__ import annotations

import fcntl
import json
import os
import pwd
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

# systemd's range for dynamic users: no distribution gives these numbers to accounts.
DEFAULT_TASK_UIDS = "61184-65519"
LINGER_S = 60.0  # how long a job keeps its uid after its last run here was started
DEFAULT_DIR = "/var/lib/peloton"
STATE_FILE = "identities.json"
LOCK_FILE = "identities.lock"
VOLUMES_DIR = ".volumes"  # persistent volumes, under a sandboxes root (peloton/host/volumes.py)
# Where any user may leave a file: a uid is not given again while one of its last owner's is here.
SHARED_DIRS = ("/tmp", "/var/tmp", "/dev/shm")
_SHARED_SCAN_LIMIT = 200_000  # entries looked at per scan: a /tmp larger than this is not searched further
_SYSV_IPC = ("/proc/sysvipc/shm", "/proc/sysvipc/msg", "/proc/sysvipc/sem")


class NoIdentity(ValueError):
    """Every uid of the range is held or still has something of its last owner's on the host."""


@dataclass(frozen=True, slots=True)
class Account:
    """Who a run runs as: Popen's user options, and the name its environment says."""

    uid: int
    gid: int
    name: str
    groups: tuple[int, ...] = ()

    def popen(self) -> dict:
        return {"user": self.uid, "group": self.gid, "extra_groups": list(self.groups)}


def parse_uid_range(text: str) -> range | None:
    """`61184-65519` (inclusive) as a range; empty: None (every run as PELOTON_TASK_USER). ValueError
    for anything else, root's uid 0 included."""
    text = text.strip()
    if not text:
        return None
    low, sep, high = text.partition("-")
    try:
        first, last = int(low), int(high)
    except ValueError:
        raise ValueError(f"PELOTON_TASK_UIDS={text!r}: expected a range of uids like {DEFAULT_TASK_UIDS}") from None
    if not sep or not 0 < first <= last < 2**31 - 1:
        raise ValueError(f"PELOTON_TASK_UIDS={text!r}: expected FIRST-LAST with 0 < FIRST <= LAST")
    return range(first, last + 1)


def dynamic_account(uid: int) -> Account:
    """A job's own identity: its uid, a group of the same number, no other groups."""
    return Account(uid, uid, f"peloton-{uid}")


class JobIdentities:
    """The machine's allotment of job identities, kept in `state_dir`; `root`: the sandbox root
    of its caller, whose sandboxes say who held what if the allotment's file was lost."""

    def __init__(self, uids: range, state_dir: Path, root: Path, linger_s: float = LINGER_S,
                 shared_dirs: Iterable[str] = SHARED_DIRS):
        self.uids = uids
        self.state_dir = Path(state_dir)
        self.root = Path(root)
        self.linger_s = linger_s
        self.shared_dirs = tuple(shared_dirs)
        self.state_dir.mkdir(mode=0o700, parents=True, exist_ok=True)

    def describe(self) -> str:
        return f"a uid of its own per job, from {self.uids.start}-{self.uids.stop - 1} (PELOTON_TASK_UIDS)"

    def take(self, job_id: str) -> Account:
        """The job's identity on this machine: the one it holds, else a free one. NoIdentity when
        none is free, saying why."""
        root = str(self.root.resolve())
        with self._state() as state:
            held = state["held"].get(job_id)
            if held is not None:
                held["used"] = time.time()
                if root not in held.setdefault("roots", []):
                    held["roots"].append(root)
                return dynamic_account(held["uid"])
            uid = self._free_uid(state, job_id)
            state["held"][job_id] = {"uid": uid, "used": time.time(), "roots": [root]}
            state["released"].pop(str(uid), None)
            return dynamic_account(uid)

    def holder(self, uid: int) -> str | None:
        """The job that holds `uid` now, if any."""
        with self._state(write=False) as state:
            return next((job for job, h in state["held"].items() if h["uid"] == uid), None)

    def release_idle(self, now: float | None = None) -> list[tuple[str, int]]:
        """Jobs whose uid no process runs as and that took it no later than LINGER_S ago give it
        back: their sandboxes become root's. (job, uid) of each one released."""
        now = time.time() if now is None else now
        with self._state(write=False) as state:
            idle = {job: h["uid"] for job, h in state["held"].items() if now - h["used"] >= self.linger_s}
        if not idle:
            return []
        running = uids_running()
        done = []
        with self._state() as state:
            for job, uid in idle.items():
                held = state["held"].get(job)
                if held is None or held["uid"] != uid or now - held["used"] < self.linger_s or uid in running:
                    continue  # taken again meanwhile, or still running
                for root in held.get("roots") or [str(self.root)]:
                    give_back_sandboxes(Path(root), uid)
                    give_back_volumes(Path(root), uid)
                del state["held"][job]
                state["released"][str(uid)] = [job, now]
                done.append((job, uid))
        return done

    # -- choosing a uid ---------------------------------------------------------------------------
    def _free_uid(self, state: dict, job_id: str) -> int:
        """Never-used uids first (no check needed but for an account of the machine); then the
        released ones, the job's own last one first, then oldest release first, each only once
        nothing of its last owner is left."""
        while state["fresh"] in self.uids:
            uid = state["fresh"]
            state["fresh"] += 1
            if not _has_account(uid):
                return uid
        released = sorted(state["released"].items(), key=lambda kv: (kv[1][0] != job_id, kv[1][1]))
        if released:
            running = uids_running()
            leftovers = owners_of_shared_files(self.shared_dirs) | sysv_ipc_owners()
            for text, _ in released:
                uid = int(text)
                if uid not in running and uid not in leftovers and uid in self.uids and not _has_account(uid):
                    return uid
        in_use = len(state["held"])
        raise NoIdentity(f"no task identity is free on this host: {in_use} of the {len(self.uids)} uids of "
                         f"PELOTON_TASK_UIDS={self.uids.start}-{self.uids.stop - 1} are held by jobs with runs here, "
                         f"and the other {len(released)} still have a process or a file of their last job's")

    @contextmanager
    def _state(self, write: bool = True) -> Iterator[dict]:
        """The allotment, read under the machine's lock and written back (whole, renamed into place)."""
        with open(self.state_dir / LOCK_FILE, "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            path = self.state_dir / STATE_FILE
            try:
                state = json.loads(path.read_text())
                valid = isinstance(state, dict) and {"held", "released", "fresh"} <= set(state)
            except (OSError, ValueError):
                valid = False
            if not valid:
                state = self._recovered()
            yield state
            if write:
                tmp = path.with_name(path.name + ".tmp")
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
                with os.fdopen(fd, "w") as f:
                    json.dump(state, f)
                os.replace(tmp, path)

    def _recovered(self) -> dict:
        """An allotment made again from the sandboxes when its file is missing or garbled: each
        sandbox still owned by a uid of the range is its job's (task ids are <job>-<instance>-<run>)."""
        held: dict[str, dict] = {}
        top = self.uids.start
        try:
            entries = list(os.scandir(self.root))
        except OSError:
            entries = []
        for entry in entries:
            try:
                uid = entry.stat(follow_symlinks=False).st_uid
            except OSError:
                continue
            if uid in self.uids and entry.is_dir(follow_symlinks=False) and entry.name.count("-") >= 2:
                held.setdefault(entry.name.rsplit("-", 2)[0], {"uid": uid, "used": time.time(),
                                                               "roots": [str(self.root.resolve())]})
                top = max(top, uid + 1)
        return {"held": held, "released": {}, "fresh": top}


def uids_running() -> set[int]:
    """Every uid some live process of this machine runs as (real, effective or saved); a zombie,
    which can do nothing any more, does not count."""
    found: set[int] = set()
    try:
        names = [n for n in os.listdir("/proc") if n.isdigit()]
    except OSError:
        return found
    for name in names:
        try:
            with open(f"/proc/{name}/status") as f:
                for line in f:
                    if line.startswith("State:") and line.split()[1] in ("Z", "X"):
                        break
                    if line.startswith("Uid:"):
                        found.update(int(v) for v in line.split()[1:4])
                        break
        except (OSError, ValueError, IndexError):
            continue
    return found


def owners_of_shared_files(dirs: Iterable[str]) -> set[int]:
    """The owners of everything under the directories any user may write, links not followed."""
    owners: set[int] = set()
    seen = 0
    stack = [d for d in dirs]
    while stack and seen < _SHARED_SCAN_LIMIT:
        try:
            with os.scandir(stack.pop()) as entries:
                for entry in entries:
                    seen += 1
                    try:
                        owners.add(entry.stat(follow_symlinks=False).st_uid)
                        if entry.is_dir(follow_symlinks=False):
                            stack.append(entry.path)
                    except OSError:
                        continue
        except OSError:
            continue
    return owners


def sysv_ipc_owners() -> set[int]:
    """The owners (uid and creator uid) of the machine's System V shared memory, queues and semaphores."""
    owners: set[int] = set()
    for table in _SYSV_IPC:
        try:
            lines = Path(table).read_text().splitlines()
        except OSError:
            continue
        if not lines:
            continue
        columns = lines[0].split()
        wanted = [columns.index(c) for c in ("uid", "cuid") if c in columns]
        for line in lines[1:]:
            values = line.split()
            owners.update(int(values[i]) for i in wanted if i < len(values) and values[i].isdigit())
    return owners


def give_back_sandboxes(root: Path, uid: int) -> int:
    """Everything of `uid` in the sandboxes under `root` becomes root's (links changed, never
    followed); the number of sandboxes it held."""
    return _give_back(root, uid, lambda name: not name.startswith("."))


def give_back_volumes(root: Path, uid: int) -> int:
    """Every persistent volume `uid` owns under `root` becomes root's, so the next job given the
    uid never reaches them (peloton/host/volumes.py gives a volume to its run at each launch)."""
    return _give_back(root / VOLUMES_DIR, uid, lambda name: True)


def _give_back(folder: Path, uid: int, wanted: Callable[[str], bool]) -> int:
    """The folders in `folder` (by name, wanted) that `uid` owns become root's, whole; how many."""
    count = 0
    try:
        entries = [e for e in os.scandir(folder) if wanted(e.name)]
    except OSError:
        return 0
    for entry in entries:
        try:
            if entry.is_dir(follow_symlinks=False) and entry.stat(follow_symlinks=False).st_uid == uid:
                count += 1
                own_tree(Path(entry.path), uid, 0, 0)
        except OSError:
            continue
    return count


def own_tree(top: Path, owner: int | None, uid: int, gid: int) -> None:
    """Gives `top` and what is inside (owned by `owner`; None: by anyone) to uid:gid, never
    following a link (a run may point one anywhere)."""
    for dirpath, dirnames, filenames in os.walk(top, followlinks=False):
        for name in [*dirnames, *filenames, None]:
            path = dirpath if name is None else os.path.join(dirpath, name)
            try:
                if owner is None or os.lstat(path).st_uid == owner:
                    os.lchown(path, uid, gid)
            except OSError:
                continue


def _has_account(uid: int) -> bool:
    try:
        pwd.getpwuid(uid)
        return True
    except KeyError:
        return False
