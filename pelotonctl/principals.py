"""Who is who on a secure Kafka: each component runs as its own user and may do only what its
part of the pipeline needs, as topics.yaml says (written_by, read_by) plus what every client of
its kind does (a stage's group, transactions and topic check; an agent's commands; the API's
event streams). Only the host manager (launch) writes agent-commands; only the API and the
listed service producers write job-commands.

    grants(Catalogue(prefix))          -> {user: [Grant, ...]}   (pure: tests and `topics acls`)
    apply(settings, passwords)         makes the users (SCRAM) and their ACLs, as the admin user
    as_user("launch", passwords)       the variables that start a process as that user

Users are the components' names. Operators read lag and dead letters through the API (as its
user); the dashboard's sampler and `pelotonctl` without an API run as the admin user.
"""

from __future__ import annotations

from dataclasses import dataclass

from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from peloton.config import Settings
from peloton.runtime import QUIET, kafka_access
from peloton.topics import Catalogue

STAGES = ("admit", "entitle", "place", "launch")
# watcher: a team's own reader of task statuses (jvm/examples' WatchStatus), which reads and writes
# nothing else.
USERS = (*STAGES, "agent", "api", "producer", "watcher")
# topics.yaml's words for who writes or reads a topic -> the user that does it. Dashboards and
# operators read as the admin user.
WORDS = {"agents": "agent", "producers": "producer", "watchers": "watcher", "api": "api", **{s: s for s in STAGES}}
SCRAM_ITERATIONS = 8192


@dataclass(frozen=True, order=True)
class Grant:
    """One ACL: `user` may do `operation` on the resource (a topic, group, transactional id or the
    cluster) named `name` exactly, or every one whose name starts with it (prefixed)."""
    user: str
    resource: str  # topic | group | transactional_id | cluster
    name: str
    operation: str  # read | write | describe | describe_configs
    prefixed: bool = False

    def __str__(self) -> str:
        what = f"{self.name}*" if self.prefixed else self.name
        return f"User:{self.user} {self.operation} {self.resource} {what}"


def grants(catalogue: Catalogue) -> dict[str, list[Grant]]:
    """user -> the ACLs it needs, for the topics and groups of this catalogue's prefix."""
    out: dict[str, set[Grant]] = {u: set() for u in USERS}
    peloton = f"{catalogue.prefix}peloton."
    for topic in catalogue:
        for word in topic.written_by:
            if word in WORDS:
                out[WORDS[word]] |= {Grant(WORDS[word], "topic", topic.name, "write"),
                                     Grant(WORDS[word], "topic", topic.name, "describe")}
        for word in (*topic.read_by, *topic.read_back_by):
            if word in WORDS:
                out[WORDS[word]] |= {Grant(WORDS[word], "topic", topic.name, "read"),
                                     Grant(WORDS[word], "topic", topic.name, "describe")}
    for stage in STAGES:
        out[stage] |= {
            # At start a stage compares every topic with topics.yaml and says what differs.
            Grant(stage, "topic", peloton, "describe", prefixed=True),
            Grant(stage, "topic", peloton, "describe_configs", prefixed=True),
            Grant(stage, "group", catalogue.group(stage), "read"),
            # Views of compacted topics and read-backs: groups of their own, never committed.
            Grant(stage, "group", f"{peloton}view.", "read", prefixed=True),
            Grant(stage, "group", f"{peloton}readback.", "read", prefixed=True),
            # One transactional id per instance: <group>.<instance>.
            Grant(stage, "transactional_id", f"{catalogue.group(stage)}.", "write", prefixed=True),
            Grant(stage, "transactional_id", f"{catalogue.group(stage)}.", "describe", prefixed=True),
        }
    out["agent"] |= {Grant("agent", "group", f"{peloton}agent.", "read", prefixed=True),
                     Grant("agent", "group", f"{peloton}view.", "read", prefixed=True)}  # host-state: its peers
    out["api"] |= {Grant("api", "group", f"{peloton}api-stream.", "read", prefixed=True),
                   Grant("api", "group", f"{peloton}view.", "read", prefixed=True)}  # hosts, pool usage
    # What the API reads for operators (pelotonctl/api/routes/operations.py): the stage groups' offsets and
    # members, every topic's log end, the first unread message's time (lag in seconds), and the dead
    # letters. It writes none of these topics; a replay through it is a job command.
    out["api"] |= {Grant("api", "group", catalogue.group(stage), "describe") for stage in STAGES}
    out["api"] |= {Grant("api", "topic", topic.name, op) for stage in STAGES for topic in catalogue.inputs_of(stage)
                   for op in ("read", "describe")}
    out["api"] |= {Grant("api", "topic", catalogue["dead-letters"].name, "read"),
                   Grant("api", "topic", catalogue["dead-letters"].name, "describe"),
                   Grant("api", "group", f"{peloton}lag-reader.", "read", prefixed=True),
                   Grant("api", "group", f"{peloton}dead-letter-reader.", "read", prefixed=True)}
    return {user: sorted(found) for user, found in out.items()}


_RESOURCES = {"topic": ResourceType.TOPIC, "group": ResourceType.GROUP,
              "transactional_id": ResourceType.TRANSACTIONAL_ID, "cluster": ResourceType.BROKER}
_OPERATIONS = {"read": AclOperation.READ, "write": AclOperation.WRITE, "describe": AclOperation.DESCRIBE,
               "describe_configs": AclOperation.DESCRIBE_CONFIGS}


def binding(grant: Grant) -> AclBinding:
    return AclBinding(_RESOURCES[grant.resource], grant.name,
                      ResourcePatternType.PREFIXED if grant.prefixed else ResourcePatternType.LITERAL,
                      f"User:{grant.user}", "*", _OPERATIONS[grant.operation], AclPermissionType.ALLOW)


class GrantError(RuntimeError):
    """The broker refused to make a user or an ACL; the message says which and why."""


def apply(settings: Settings, passwords: dict[str, str], timeout: float = 30.0) -> int:
    """Make each user in `passwords` (SCRAM-SHA-512) and give every user its ACLs for the topics
    of settings.topic_prefix, as settings' (admin) user. Both are idempotent. The number of ACLs."""
    admin = AdminClient({**kafka_access(settings), **QUIET})
    if passwords:
        upserts = [UserScramCredentialUpsertion(user, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512,
                                                                           SCRAM_ITERATIONS), password.encode())
                   for user, password in passwords.items()]
        for user, future in admin.alter_user_scram_credentials(upserts, request_timeout=timeout).items():
            try:
                future.result()
            except Exception as exc:  # noqa: BLE001 - any refusal is reported with its user
                raise GrantError(f"making Kafka user {user} failed: {exc}") from exc
    bindings = [binding(g) for found in grants(Catalogue(settings.topic_prefix)).values() for g in found]
    for acl, future in admin.create_acls(bindings, request_timeout=timeout).items():
        try:
            future.result()
        except Exception as exc:  # noqa: BLE001
            raise GrantError(f"creating the ACL {acl} failed: {exc}") from exc
    return len(bindings)


def new_passwords() -> dict[str, str]:
    """A fresh password for every component's user."""
    import secrets

    return {user: secrets.token_hex(16) for user in USERS}


def as_user(user: str, passwords: dict[str, str] | None) -> dict[str, str]:
    """The variables that make a child process `user` on Kafka (none without passwords: a broker
    without security, where nobody has a name)."""
    if not passwords:
        return {}
    return {"PELOTON_KAFKA_USER": user, "PELOTON_KAFKA_PASSWORD": passwords[user]}
