"""Prometheus metrics of every stage instance and agent (prometheus_client).

One process is one stage instance or one agent, so the metrics live in the process's default
registry, beside prometheus_client's own process metrics (CPU seconds, resident memory). Names
follow what operators already use: kafka_consumergroup_lag{consumergroup, topic, partition} and
kafka_consumergroup_lag_seconds as kafka-lag-exporter names them, then the scheduler's own under
peloton_. Each stage instance reports lag for the partitions it owns, so a sum over instances
is the group's lag; the API's lag sampler reports every group's from the brokers (peloton_group_*).
"""

from __future__ import annotations

import logging
import socket

from prometheus_client import Counter, Gauge, Histogram, start_http_server

from peloton.config import Settings

log = logging.getLogger(__name__)

# -- consumer groups (every stage, from the runtime) ------------------------------------------
LAG = Gauge("kafka_consumergroup_lag", "Messages between the group's committed offset and the log end",
            ["consumergroup", "topic", "partition"])
LAG_SECONDS = Gauge("kafka_consumergroup_lag_seconds",
                    "Seconds the oldest message not yet committed has waited (0 when there is no lag)",
                    ["consumergroup", "topic", "partition"])
HELD = Gauge("peloton_consumergroup_held_messages",
             "Messages behind the committed offset that the stage has read and holds (gangs waiting for a host): "
             "waiting for room, not a backlog", ["consumergroup", "topic", "partition"])
RECORDS = Counter("peloton_records_handled_total", "Records handed to the stage's handler", ["stage", "topic"])
BATCH_SECONDS = Histogram("peloton_batch_seconds", "Time to handle one polled batch", ["stage"],
                          buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10))
BATCH_RECORDS = Histogram("peloton_batch_records", "Records per polled batch", ["stage"],
                          buckets=(1, 10, 50, 100, 250, 500, 1000, 2500, 5000))
DEAD_LETTERS = Counter("peloton_dead_letters_total", "Messages sent to the dead-letter topic",
                       ["stage", "reason"])
RETRIES = Counter("peloton_unavailable_retries_total", "Pauses while the broker or the store was unavailable",
                  ["stage"])

# -- every stage group, from the brokers, by a process that is none of them -----------------------
# The API's lag sampler (pelotonctl/lag_sampler.py) sets these: a group's committed offsets and
# log ends as its brokers keep them, so its series go on (and its lag grows) when its last
# instance has died, where the instances' own kafka_consumergroup_lag goes with them.
GROUP_LAG = Gauge("peloton_group_lag", "Messages between the group's committed offset and the log end, from the "
                  "brokers (kept while the group has no live member)", ["group", "stage", "topic", "partition"])
GROUP_LAG_SECONDS = Gauge("peloton_group_lag_seconds", "Seconds the oldest message the group has not committed has "
                          "waited, from the brokers (0 when there is no lag)", ["group", "stage", "topic", "partition"])
GROUP_STATUS = Gauge("peloton_group_status", "1 for the group's status word in Burrow's manner (OK, WARN, STALL, "
                     "STOP, ERR), 0 for the others", ["group", "stage", "status"])
GROUP_MEMBERS = Gauge("peloton_group_members", "Members the group's coordinator lists (it keeps a member that died "
                      "until its session times out)", ["group", "stage"])
GROUP_SAMPLED = Gauge("peloton_group_sampled_timestamp_seconds", "When the group was last sampled: the age of the "
                      "peloton_group_* values (it stops moving while the broker does not answer)", ["group", "stage"])

# -- the scheduler ------------------------------------------------------------------------------
TASKS = Gauge("peloton_tasks", "Tasks in the cluster by state (reported by the admit instance owning "
              "job-commands partition 0)", ["state"])
TASK_TRANSITIONS = Counter("peloton_task_transitions_total", "Task state changes the job manager recorded",
                           ["state"])
JOBS_CREATED = Counter("peloton_jobs_created_total", "Jobs accepted", ["pool"])
ADMISSIONS = Counter("peloton_admitted_gangs_total", "Gangs admitted by the resource manager", ["pool"])
ADMITTED_TASKS = Counter("peloton_admitted_tasks_total", "Tasks admitted by the resource manager", ["pool"])
PREEMPTIONS = Counter("peloton_preemptions_total", "Task runs preempted", ["pool", "kind"])
POOL_ENTITLEMENT = Gauge("peloton_pool_entitlement", "What the pool may use now", ["pool", "kind"])
POOL_ALLOCATION = Gauge("peloton_pool_allocation", "What the pool's admitted runs hold", ["pool", "kind"])
POOL_DEMAND = Gauge("peloton_pool_demand", "What the pool's queued gangs ask for", ["pool", "kind"])
POOL_QUEUED_GANGS = Gauge("peloton_pool_queued_gangs", "Gangs waiting in the pool's queue", ["pool"])
PLACEMENTS = Counter("peloton_placements_total", "Tasks placed on hosts", ["strategy"])
PLACEMENT_FAILED_TRIES = Counter("peloton_placement_failed_tries_total", "Tries that found no hosts for a gang")
PLACEMENT_REFUSALS = Counter("peloton_placement_refusals_total",
                             "Gangs sent back to their pool after a placement cycle found no hosts, by the reason "
                             "that refused the most hosts", ["reason"])
GANGS_WAITING_FOR_HOSTS = Gauge("peloton_place_waiting_gangs", "Gangs the placement engine holds, waiting for a host")
LAUNCHES = Counter("peloton_launches_total", "Task runs the host manager started", ["driver"])
API_DECISIONS = Counter("peloton_api_decisions_total", "The API's decisions on requests, by action and outcome",
                        ["action", "outcome"])
LAUNCH_REFUSALS = Counter("peloton_launch_refusals_total", "Placements the host manager refused", ["reason"])
HOSTS = Gauge("peloton_hosts", "Hosts of this host manager's shards by state", ["state"])
UNREAD_LAUNCHES = Gauge("peloton_launch_unread_launches",
                        "Runs past the agent timeout whose agent has not read their launch yet (they wait for it)")

# -- host agents ------------------------------------------------------------------------------
AGENT_RUNS = Gauge("peloton_agent_runs", "Task runs the agent process has now, over all its hosts", ["agent"])
AGENT_COMMANDS = Counter("peloton_agent_commands_total", "Commands the agent carried out", ["kind"])
AGENT_REPORTS = Counter("peloton_agent_reports_total", "Reports (heartbeats) the agent sent")
AGENT_PRODUCER_RENEWALS = Counter("peloton_agent_producer_renewals_total",
                                  "Times the agent replaced a Kafka producer that stopped answering its reports")
AGENT_READER_RENEWALS = Counter("peloton_agent_reader_renewals_total",
                                "Times the agent replaced a Kafka consumer that stopped fetching its commands")
AGENT_HELD_LAUNCHES = Counter("peloton_agent_held_launches_total",
                              "Launches the agent read as its lease ran out and held for a report, by how each "
                              "ended: started, lost (no report in time), killed or stopped (the agent was)",
                              ["outcome"])
AGENT_RUN_CPU = Counter("peloton_agent_run_cpu_seconds_total",
                        "CPU seconds the agent's ended runs used, as their cgroups counted them", ["agent"])
AGENT_RUN_PEAK_MEMORY = Histogram("peloton_agent_run_peak_memory_mb", "Peak memory of each ended run, from its cgroup",
                                  ["agent"], buckets=(1, 4, 16, 64, 256, 1024, 4096, 16384, 65536))
AGENT_LIMIT_KILLS = Counter("peloton_agent_limit_kills_total", "Runs the kernel or the agent ended for going over "
                            "a limit of theirs", ["agent", "reason"])

RESOURCE_KINDS = {"cpu": "cpu", "mem_mb": "memory", "disk_mb": "disk", "gpu": "gpu"}  # field -> Peloton kind


def set_pool(gauge: Gauge, pool: str, resources: dict) -> None:
    for field, kind in RESOURCE_KINDS.items():
        gauge.labels(pool, kind).set(resources[field])


def serve(settings: Settings) -> str | None:
    """Serve /metrics on PELOTON_METRICS_PORT (0: any free port; below 0: not at all). Returns the
    address to announce (`http://host:port/metrics`), or None."""
    if settings.metrics_port < 0:
        return None
    try:
        server, _thread = start_http_server(settings.metrics_port, addr=settings.metrics_host)
    except OSError as exc:  # metrics are for operators: a taken port is logged, not fatal
        log.warning("metrics not served on %s:%d (PELOTON_METRICS_PORT): %s", settings.metrics_host,
                    settings.metrics_port, exc)
        return None
    host, port = server.server_address[:2]
    if isinstance(host, bytes | bytearray):  # the type allows bytes; a TCP server's host is a str
        host = host.decode()
    if host in ("0.0.0.0", "::"):
        host = socket.gethostname()
    address = f"http://{host}:{port}/metrics"
    log.info("metrics on %s", address)
    return address


def at_zero(family: Counter, *label_sets: tuple[str, ...]) -> None:
    """Series of a labelled counter made at 0 for the label values known in advance, so that a
    rate over them answers 0 rather than nothing before the first event (a dashboard's panel, an
    alert's `increase`)."""
    for labels in label_sets:
        family.labels(*labels)
