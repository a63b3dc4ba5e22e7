"""Settings for every process, from the environment (PELOTON_*) with dev-friendly defaults.

Every period and timeout lives here so tests can shorten them instead of sleeping long.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from peloton.model.jobspec import JobLimits
from peloton.model.safe_yaml import YamlLimits
from peloton.store.base import CLAIMS_KEPT_MS

# The repository root holds topics.yaml and schemas/avro; an installed copy finds them the same way
# because the package is installed in editable mode from the checkout.
REPO_ROOT = Path(__file__).resolve().parent.parent
# The shortest agent lease allowed: an agent fences (kills every run) when the broker has not
# acknowledged its reports for its lease, so a lease shorter than an ordinary broker hiccup (a
# stalled request, a reconnect, a partition's leader moving: seconds) would kill healthy tasks.
MIN_AGENT_LEASE_S = 3.0


def home_dir() -> Path:
    return Path(os.environ.get("PELOTON_HOME") or (REPO_ROOT / ".peloton")).resolve()


@dataclass(frozen=True)
class Settings:
    bootstrap: str = "127.0.0.1:9092"
    # Who this process is to Kafka (SASL SCRAM-SHA-512 over TLS, checked against kafka_ca, a PEM
    # file; empty: the system's CAs). No user: plaintext, no name (a broker without security).
    kafka_user: str = ""
    kafka_password: str = ""
    kafka_ca: str = ""
    topic_prefix: str = ""
    # The store: `postgresql://user@host:port/db` (several machines), or `sqlite:///path` or a
    # plain path (the embedded default, one machine).
    store: str = field(default_factory=lambda: str(home_dir() / "peloton.db"))
    home: Path = field(default_factory=home_dir)
    # ZooKeeper connect string (host:port,...): the instance registry. Empty: no registry.
    # zookeeper_auth ("user:password"): the digest credentials every node is made under, that user's
    # alone (empty: nodes open to anyone who reaches ZooKeeper).
    zookeeper: str = ""
    zookeeper_auth: str = ""
    # Host inventory, e.g. "agent:2:cpu=4,mem_mb=8192;sim:100:cpu=32": agent hosts are host agent
    # processes (dev up starts them), local and sim hosts run inside the launch stage.
    hosts: str = "agent:2:cpu=8,mem_mb=16384,disk_mb=100000"
    sim_task_seconds: float = 1.0
    # Consumer group timing (a classic group; Kafka's brokers refuse less than 6 s unless
    # group.min.session.timeout.ms says otherwise, as the dev stack's and tests' brokers do).
    # Well above a broker's failover (the dev stack's: 4-7 s, broker.session.timeout.ms 4 s and
    # the election, then the new coordinator loads the group): a member whose coordinator died
    # keeps its session, and no rebalance follows; half this is not enough for a member that
    # last heard its coordinator a moment before it died. A SIGKILLed instance's partitions move
    # this long after its death (Kafka's own default is 45 s).
    session_timeout_ms: int = 20000
    # A stage's output and its consumed offsets commit in one Kafka transaction per batch
    # (false: at least once, offsets committed after the output is flushed). A transaction left
    # open by a killed instance holds back its readers this long at most.
    exactly_once: bool = True
    transaction_timeout_s: float = 10.0
    poll_timeout_s: float = 0.05
    # Records a stage takes per turn at most (it takes what has arrived within the poll timeout).
    # Each turn pays a transaction and a store commit, and a task's steps that arrive in one turn
    # are written once: 5,000 rather than 1,000 took the stages' CPU per task from 0.33 to 0.29 ms,
    # the broker's from 0.21 to 0.17, and a steady load's p99 from 1.2 to 0.8 s (make bench).
    max_batch: int = 5000
    # Tasks a turn brings in at most, where one record brings many (a job's create): a backlog of
    # 5,000 creates of 1,000 tasks, read in one turn, would make five million task rows at once
    # (about 1.7 KB each in admit) and end the stage for memory, again at every restart. The
    # record that passes it waits for the next turn; a record above it alone still goes.
    max_turn_tasks: int = 50_000
    # Entitle's admission tick, place's retry backoff for gangs that found no host.
    admission_tick_s: float = 0.1
    placement_backoff_s: float = 0.5
    # Tries in one placement cycle; then the gang goes back to its pool's queue (Peloton's rule).
    placement_attempts: int = 10
    # How long place counts its own placements on a host before host state must show them.
    placement_pending_ttl_s: float = 3.0
    # A gang blocked at the head of its pool's queue for this long stops blocking smaller gangs
    # behind it (Peloton's head-of-line rule, with a bound).
    head_of_line_timeout_s: float = 30.0
    # Entitle: the whole tree's entitlement recomputed and its own pools' usage published at least
    # this often, and at once on a change (Peloton's resource manager: every 60 s).
    entitlement_period_s: float = 60.0
    # Entitle rereads the pool tree from the store this often: a pool made or changed by
    # `respool create|update` counts within a second (Peloton's resource manager owns its tree).
    pool_refresh_s: float = 1.0
    # Inter-pool preemption: a pool above its entitlement for this many periods in a row has its
    # excess preempted (Peloton's defaults: 5 periods of 60 s). 0: off. The dev stack and the
    # tests run faster (DEV_PACE).
    preemption_period_s: float = 60.0
    preemption_sustained_periods: int = 5
    # The job manager's deadlines, checked every deadline_check_s: a run launched but not RUNNING
    # within launch_timeout_s is killed and run again (Peloton: 20 min in production); a run
    # beyond its job's sla.maxRunningTime is killed and fails (reason DEADLINE_EXCEEDED).
    deadline_check_s: float = 5.0
    launch_timeout_s: float = 600.0
    # A SERVICE task that exits runs again after min(base * 2^(n-1), 60 min) (Peloton: 30 s).
    service_backoff_base_s: float = 30.0
    # A gang that placement sent back waits this long before its pool admits it again.
    requeue_backoff_s: float = 2.0
    # Host agents report at least every agent_heartbeat_s; the host manager marks a host whose
    # reports stop for agent_timeout_s DOWN and its runs LOST (they run again elsewhere). An agent
    # none of whose reports reached the broker for agent_lease_s kills its runs first (fencing);
    # 0: the timeout less a margin (agent_lease()). See check().
    agent_heartbeat_s: float = 1.0
    agent_timeout_s: float = 20.0
    agent_lease_s: float = 0.0
    # A control-plane outage (most agents cut off from the brokers at once,
    # docs/concepts/delivery-and-fencing.md) kills nothing for this long past an agent's lease; beyond it, runs
    # are fenced as when one host alone is cut off. 0: every lease is fenced at its end.
    agent_outage_limit_s: float = 300.0
    # Who runs run as, where agents run as root: each job under a uid and gid of its own on a host,
    # from this range (systemd's for dynamic users; the agents of one machine share it), so no
    # job's run can signal, trace or read another's. Empty: every run as task_user, an
    # unprivileged account unless told `root`. Agents not running as root run tasks as themselves.
    task_uids: str = "61184-65519"
    # Where the machine's allotment of those uids is kept: one for every agent of the machine.
    identities_dir: str = "/var/lib/peloton"
    task_user: str = "nobody"
    # The accounts a job's own command.user may name (comma-separated; `*`: any but root; root
    # only by name). Empty: none, and a task that names a user fails saying so.
    task_users: str = ""
    # Host agents run each task in a cgroup of its own (cpu quota, memory with swap off, pids) where
    # the host allows it (root, cgroups mounted): `auto`; `off`: bare process groups, resources
    # only counted. Tasks of `local` hosts (inside launch) are never isolated.
    isolation: str = "auto"
    task_pids_max: int = 4096
    # Where the host's GPU device nodes are (nvidia0, ...): what an agent finds and gives out, each
    # run allowed its own alone (peloton/host/devices.py).
    gpu_dev_dir: str = "/dev"
    # The OCI runtime agents run tasks that name an image in: `auto` (runc where installed and the
    # agent is root), a binary's name or path, or `off`. Images are root file systems under
    # image_dir (empty: $PELOTON_HOME/images), one directory per image (`pelotonctl image import`).
    container_runtime: str = "auto"
    image_dir: str = ""
    # `host maintenance start` refuses (unless forced) to put more than this share of the hosts
    # in maintenance at once, or to drain the last UP host.
    max_drain_share: float = 0.5
    # The API (`pelotonctl api`): groups whose members administer the cluster (comma-separated),
    # besides holders of admin tokens.
    admin_groups: str = ""
    # Where the API is, and the bearer token to send it (a running dev stack's by default).
    api_url: str = ""
    # Where the API's gRPC port is (host:port), for Peloton's own clients (`pelotonctl dev env`).
    grpc_address: str = ""
    # The API's certificate and key (PEM files): with both, its HTTP and gRPC ports speak TLS.
    api_tls_cert: str = ""
    api_tls_key: str = ""
    token: str = ""
    # Job commands carry their sender's signature (peloton.auth.signing): required, admit refuses
    # an unsigned or badly signed command, and one whose signer may not act on its pool.
    # command_token: the token this process signs its commands with (the API's service token,
    # a team's producer).
    signed_commands: bool = False
    command_token: str = ""
    # How long the API waits for the job manager to act on a command when asked to (wait=true).
    command_wait_s: float = 30.0
    # Agents serve a run's stdout and stderr only against the API's grant for that run
    # (peloton.auth.grants): the API signs grants with agent_logs_key (its Ed25519 private key),
    # agents check them with agent_logs_public_key (empty: agents serve nothing, and task logs are
    # read on the CLI's own machine); on this address (0.0.0.0: every interface, advertised by host
    # name) and port (0: any free one).
    agent_logs_key: str = ""
    agent_logs_public_key: str = ""
    # Agents sign each report with their host's key, which the host manager checks (peloton.auth.
    # host_keys): launch holds the cluster's agents key (agent_report_key) and derives every
    # host's; an agent holds its own host's (host_key), or, simulating many hosts, the cluster's.
    # Empty on launch: reports are not checked.
    agent_report_key: str = ""
    host_key: str = ""
    agent_logs_host: str = "127.0.0.1"
    agent_logs_port: int = 0
    # Identities from an OIDC issuer besides our own tokens (peloton.auth.oidc): the issuer every
    # JWT must name, the audience (this cluster's client id there), and the claims that carry the
    # user and the groups. The keys' address is discovered from the issuer unless given.
    oidc_issuer: str = ""
    oidc_audience: str = ""
    oidc_jwks_url: str = ""
    oidc_user_claim: str = "preferred_username"
    oidc_groups_claim: str = "groups"
    # Prometheus metrics of each stage instance and agent: served on this port (0: any free port,
    # announced in the registry and the log; below 0: not served) and address (0.0.0.0 for all).
    metrics_port: int = 0
    metrics_host: str = "127.0.0.1"
    # How often a stage refreshes its consumer-lag metrics.
    metrics_period_s: float = 1.0
    # The largest record a stage may produce (librdkafka's and Kafka's default limit is ~1 MB).
    max_message_bytes: int = 1_000_000
    # While the broker or the store is unavailable a stage waits and tries again, backing off
    # from retry_min_s to retry_max_s; flush_timeout_s bounds one wait for the broker.
    retry_min_s: float = 0.2
    retry_max_s: float = 5.0
    flush_timeout_s: float = 10.0
    # librdkafka's debug contexts for a stage's producer and consumer (e.g. "eos,topic,broker"),
    # written to the stage's log: for finding out why a stage waits on the broker.
    kafka_debug: str = ""
    # How often a stage checks that every topic exists (a broker that restarted empty has none),
    # and how far back launch sends task ends again when the broker lost them.
    topic_check_s: float = 5.0
    status_replay_s: float = 600.0
    # How long entitle remembers a run that ended, to recognise a late redelivery of its demand.
    released_keep_s: float = 86400.0
    # How long a job that ended is kept (with its tasks and events) before the job manager deletes
    # it, as Nomad's job GC does; 0 keeps it until someone deletes it (Peloton's way).
    job_retention_s: float = 30 * 86400.0
    # How long an agent keeps a run's sandbox (its stdout, stderr and files) after the run ended, as
    # Mesos' agent gc_delay (a week there too); 0 keeps sandboxes until removed by hand.
    sandbox_keep_s: float = 7 * 86400.0
    # What one job file may be and one task may ask for (far above real hosts: they catch typos
    # and hostile files before anything is queued).
    max_config_bytes: int = 1_048_576
    max_task_cpu: float = 1024.0
    max_task_mem_mb: float = 4_194_304.0
    max_task_disk_mb: float = 104_857_600.0
    max_task_gpu: float = 64.0

    @classmethod
    def from_env(cls, **overrides: Any) -> Settings:
        """Settings from PELOTON_* variables; a value that does not parse is a SettingsError
        naming the variable."""
        home = home_dir()
        # A running dev stack is the default: its broker, store and ZooKeeper.
        values: dict[str, Any] = {"home": home, "store": str(home / "peloton.db"), "bootstrap": cls.bootstrap,
                                  **_dev_stack(home)}
        for f in fields(cls):
            name = _env_name(f.name)
            raw = os.environ.get(name)
            if raw is not None and (raw != "" or f.name == "topic_prefix"):
                typ = str(f.type)  # already a string: this module's annotations are postponed
                try:
                    values[f.name] = _parse(typ, raw)
                except ValueError:
                    kind = {"int": "a whole number", "float": "a number", "bool": "true or false"}.get(typ, typ)
                    raise SettingsError(f"{name}={raw!r}: expected {kind}") from None
        values.update(overrides)
        return cls(**values).check()

    def images(self) -> Path:
        """Where agents find images (root file systems), and `image import` puts them."""
        return Path(self.image_dir) if self.image_dir else Path(self.home) / "images"

    def admin_group_set(self) -> frozenset[str]:
        """admin_groups as a set of group names."""
        return frozenset(g.strip() for g in self.admin_groups.split(",") if g.strip())

    def lease_margin(self) -> float:
        """How much longer than an agent's lease the host manager waits before it calls the
        agent's runs lost: the agent's loop and its kill fit in it."""
        return max(2.0, 2 * self.agent_heartbeat_s)

    def agent_lease(self) -> float:
        return self.agent_lease_s or self.agent_timeout_s - self.lease_margin()

    def problems(self) -> list[str]:
        """Settings that do not fit together, each with the names and numbers involved."""
        out = []
        beat, timeout = self.agent_heartbeat_s, self.agent_timeout_s
        lease, margin = self.agent_lease(), self.lease_margin()
        the_lease = f"the agent lease ({lease:g}s: PELOTON_AGENT_LEASE_S, or PELOTON_AGENT_TIMEOUT_S less {margin:g}s)"
        if not beat > 0:
            out.append(f"PELOTON_AGENT_HEARTBEAT_S={beat:g} must be above 0")
        elif lease < MIN_AGENT_LEASE_S:
            out.append(f"{the_lease} must be at least {MIN_AGENT_LEASE_S:g}s: a broker hiccup must not make "
                       f"agents kill healthy runs")
        elif lease < 3 * beat:
            out.append(f"{the_lease} must be at least 3 heartbeats (PELOTON_AGENT_HEARTBEAT_S={beat:g}): two "
                       f"reports lost in a row must not make an agent kill its runs")
        if timeout < lease + margin:
            out.append(f"PELOTON_AGENT_TIMEOUT_S={timeout:g} must be at least the agent lease "
                       f"(PELOTON_AGENT_LEASE_S={lease:g}) plus {margin:g}s: a silent host's runs may run "
                       f"elsewhere only once its agent has surely killed them")
        if self.poll_timeout_s * 4 > beat:
            out.append(f"PELOTON_POLL_TIMEOUT_S={self.poll_timeout_s:g} must be at most a quarter of "
                       f"PELOTON_AGENT_HEARTBEAT_S={beat:g}: a stage's loop must see each heartbeat")
        if self.session_timeout_ms < 300 or self.session_timeout_ms / 1000 < 3 * self.poll_timeout_s:
            out.append(f"PELOTON_SESSION_TIMEOUT_MS={self.session_timeout_ms} is too short: at least 300 ms and "
                       f"3 poll timeouts (PELOTON_POLL_TIMEOUT_S={self.poll_timeout_s:g})")
        if self.launch_timeout_s <= timeout:
            out.append(f"PELOTON_LAUNCH_TIMEOUT_S={self.launch_timeout_s:g} must be above PELOTON_AGENT_TIMEOUT_S="
                       f"{timeout:g}: a launch is not given up on before its host could be")
        if not 0 < self.max_drain_share <= 1:
            out.append(f"PELOTON_MAX_DRAIN_SHARE={self.max_drain_share:g} must be above 0 and at most 1")
        if not self.container_runtime:
            out.append("PELOTON_CONTAINER_RUNTIME is empty: expected auto, off, or a runtime's name or path")
        if self.isolation not in ("auto", "off"):
            out.append(f"PELOTON_ISOLATION={self.isolation!r}: expected auto or off")
        if self.released_keep_s * 1000 >= CLAIMS_KEPT_MS:
            out.append(f"PELOTON_RELEASED_KEEP_S={self.released_keep_s:g} must be below {CLAIMS_KEPT_MS // 1000}s "
                       f"(nine days): a deleted job's id is taken again after that, and its new runs would look "
                       f"like the old job's ended ones")
        if self.sandbox_keep_s < 0:
            out.append(f"PELOTON_SANDBOX_KEEP_S={self.sandbox_keep_s:g} must be 0 (keep sandboxes) or above")
        if self.job_retention_s < 0:
            out.append(f"PELOTON_JOB_RETENTION_S={self.job_retention_s:g} must be 0 (keep jobs that ended until "
                       f"deleted) or above")
        low, _, high = self.task_uids.partition("-")
        if self.task_uids and not (low.isdigit() and high.isdigit() and 0 < int(low) <= int(high) < 2**31 - 1):
            out.append(f"PELOTON_TASK_UIDS={self.task_uids!r}: expected a range of uids FIRST-LAST above 0, like "
                       f"61184-65519, or empty (every run as PELOTON_TASK_USER)")
        if self.retry_min_s > self.retry_max_s:
            out.append(f"PELOTON_RETRY_MIN_S={self.retry_min_s:g} is above PELOTON_RETRY_MAX_S={self.retry_max_s:g}")
        return out

    def check(self) -> Settings:
        """These settings, or a SettingsError listing every problem (see problems())."""
        problems = self.problems()
        if problems:
            raise SettingsError("settings that do not fit together:\n  " + "\n  ".join(problems))
        return self

    def job_limits(self) -> JobLimits:
        return JobLimits(cpu=self.max_task_cpu, mem_mb=self.max_task_mem_mb, disk_mb=self.max_task_disk_mb,
                         gpu=self.max_task_gpu, users=self.task_users, default_user=self.task_user)

    def yaml_limits(self) -> YamlLimits:
        return YamlLimits(max_bytes=self.max_config_bytes)

    def env(self) -> dict[str, str]:
        """These settings as PELOTON_* variables, for starting child processes."""
        return {_env_name(f.name): str(getattr(self, f.name)) for f in fields(self)}


# The resource manager's pace on a dev stack and in the tests: Peloton's own dev config (10 s
# preemption periods, 3 of them) and an entitlement every second, so a demo shows pools lending
# and taking back within seconds. Production runs Peloton's defaults (the fields above).
DEV_PACE = {"entitlement_period_s": 1.0, "preemption_period_s": 10.0, "preemption_sustained_periods": 3}


def dev_pace(settings: Settings) -> Settings:
    """settings at DEV_PACE, but for a PELOTON_* variable that sets one of them."""
    pace: dict[str, Any] = {name: value for name, value in DEV_PACE.items() if not os.environ.get(_env_name(name))}
    return replace(settings, **pace)


class SettingsError(ValueError):
    """A PELOTON_* variable holds a value that does not parse; the message names it."""


# Field -> variable: PELOTON_<FIELD>, but for the two whose names predate this table.
_ENV_NAMES = {"bootstrap": "PELOTON_KAFKA_BOOTSTRAP", "store": "PELOTON_STORE"}


def _env_name(field_name: str) -> str:
    return _ENV_NAMES.get(field_name) or f"PELOTON_{field_name.upper()}"


def _parse(type_name: str, raw: str) -> object:
    parsers: dict[str, Callable[[str], object]] = {"int": int, "float": float, "Path": Path, "bool": _bool}
    return parsers.get(type_name, str)(raw)


def _bool(raw: str) -> bool:
    word = raw.strip().lower()
    if word in ("1", "true", "yes", "on"):
        return True
    if word in ("0", "false", "no", "off"):
        return False
    raise ValueError(raw)


def _dev_stack(home: Path) -> dict:
    """What a running dev stack records (broker and its admin user, store, ZooKeeper, the API and
    its admin token), so the CLI finds it without flags."""
    try:
        state = json.loads((home / "dev" / "stack.json").read_text())
    except (OSError, ValueError):
        return {}
    keys = ("bootstrap", "store", "zookeeper", "zookeeper_auth", "api_url", "token", "kafka_user", "kafka_password",
            "kafka_ca", "signed_commands", "command_token", "task_users")
    return {k: state[k] for k in keys if state.get(k)}
