"""A hostile tenant: on the secure dev stack (`dev up --store postgres`: Kafka with SASL and ACLs,
PostgreSQL with passwords, ZooKeeper with digest ACLs, two host agents), a job submitted with an
ordinary team's token tries every way out that its task has (tenant_escapes.py: the agent's
environment, the servers' files, the store's and ZooKeeper's ports with no password, Kafka with
guessed users, another team's processes and files, the agents' log servers without a grant), and
every attempt fails, while its own work succeeds and the other team's job runs on untouched."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import uuid
from pathlib import Path

import pytest

from peloton.private import readable_by_others
from tests.integration.helpers import ctl_in, stack_env, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.long]

ESCAPES = Path(__file__).with_name("tenant_escapes.py")
POOL = """
name: {team}
owningTeam: {team}
resources:
- {{kind: cpu, reservation: 4, limit: 4, share: 1}}
- {{kind: memory, reservation: 4096, limit: 4096, share: 1}}
- {{kind: disk, reservation: 10000, limit: 10000, share: 1}}
- {{kind: gpu, reservation: 0, limit: 0, share: 1}}
"""
VICTIM = """
name: victim
instancecount: 2
sla: {{preemptible: false}}
defaultconfig:
  resource: {{cpulimit: 0.1, memlimitmb: 32, disklimitmb: 10}}
  command: {{shell: true, value: 'echo {secret}; echo {secret} > private; sleep {mark}'}}
"""
HOSTILE = """
name: hostile
instancecount: 1
sla: {{preemptible: false}}
defaultconfig:
  resource: {{cpulimit: 0.5, memlimitmb: 256, disklimitmb: 10}}
  command:
    shell: true
    value: '/usr/bin/python3 -c "$ESCAPES"'
    environment: {environment}
"""


def test_a_hostile_tenants_task_reaches_nothing_of_the_cluster_or_of_another_team(tmp_path) -> None:
    import sysconfig

    top = Path(tempfile.mkdtemp(prefix="peloton-hostile-"))
    os.chmod(top, 0o711)  # runs reach their sandboxes below it by path ($HOME, $TMPDIR)
    home = top / "home"
    ctl = ctl_in(stack_env(home), 180)
    up = ctl("dev", "up", "--store", "postgres", "--hosts", "agent:2:cpu=4,mem_mb=4096,disk_mb=10000")
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        state = json.loads((home / "dev" / "stack.json").read_text())
        admin = ctl_in(stack_env(home), 60)
        for team in ("team-a", "team-b"):
            (tmp_path / f"{team}.yaml").write_text(POOL.format(team=team))
            made = admin("respool", "create", f"/{team}", str(tmp_path / f"{team}.yaml"))
            assert made.returncode == 0, made.stderr
        alice = admin("auth", "issue", "--user", "alice", "--group", "team-a").stdout.strip()
        bob = admin("auth", "issue", "--user", "bob", "--group", "team-b").stdout.strip()
        as_alice = ctl_in(stack_env(home, PELOTON_TOKEN=alice), 60)
        as_bob = ctl_in(stack_env(home, PELOTON_TOKEN=bob), 60)

        # Bob's job: a secret in its output and in a file of its sandbox, a mark in its command line.
        secret, mark = f"bob-secret-{uuid.uuid4().hex}", "117.25"
        (tmp_path / "victim.yaml").write_text(VICTIM.format(secret=secret, mark=mark))
        victim = as_bob("job", "create", "/team-b", str(tmp_path / "victim.yaml")).stdout.split()[1]
        wait_until("victim running", lambda: json.loads(as_bob("job", "status", victim, "--json").stdout)
             .get("tasks", {}).get("RUNNING") == 2, 60)
        victim_task = json.loads(as_bob("task", "list", victim, "--json").stdout)[0]
        victim_task_id = f"{victim}-{victim_task['instance']}-{victim_task['run_id']}"
        logs = [line.split("run output served at ")[1].split(",")[0]
                for name in ("agent-0", "agent-1")
                for line in (home / "dev" / "logs" / f"{name}.log").read_text().splitlines()
                if "run output served at" in line]
        assert len(logs) == 2, logs
        pg = state["store"].split("@")[1].split("/")[0]
        kafka_dir = home / "dev" / "kafka"
        files = [home / "dev" / "stack.json", kafka_dir / "access.json", kafka_dir / "node-1" / "server.properties",
                 kafka_dir / "tls" / "broker.pem", home / "agents" / "agent-0" / "runs.json",
                 home / "dev" / "logs" / "api.log", home / "sandboxes" / victim_task_id / "private"]
        environment = {
            "ESCAPES": ESCAPES.read_text(), "PYTHONPATH": sysconfig.get_paths()["purelib"],
            "T_HOME": str(home), "T_FILES": json.dumps([str(f) for f in files]), "T_PG": pg,
            "T_ZK": state["zookeeper"], "T_KAFKA": state["bootstrap"], "T_CA": state["kafka_ca"],
            "T_LOGS": json.dumps(logs), "T_VICTIM_TASK": victim_task_id,
            "T_VICTIM_SANDBOX": str(home / "sandboxes" / victim_task_id), "T_VICTIM_MARK": mark}
        (tmp_path / "hostile.yaml").write_text(HOSTILE.format(environment=json.dumps(environment)))
        hostile = as_alice("job", "create", "/team-a", str(tmp_path / "hostile.yaml"), "--wait", "--timeout", "120")
        job = hostile.stdout.split()[1]
        assert hostile.returncode == 0, (hostile.stdout + hostile.stderr, as_alice("job", "status", job).stdout,
                                         as_alice("task", "logs", job, "0", "--stderr").stdout[-3000:])
        said = as_alice("task", "logs", job, "0")  # through the API, which gives the agent its grant
        assert said.returncode == 0, said.stderr
        tried = [json.loads(line) for line in said.stdout.splitlines() if line.startswith("{")]
        by_name = {t["try"]: t for t in tried}

        # Every way out was tried, and none got in.
        assert by_name["found the victim's processes"]["got_in"], "the victim's processes were not found"
        escapes = [t for t in tried if t["try"] not in ("environment", "command lines", "own work",
                                                         "found the victim's processes")]
        assert len(escapes) >= len(files) + 3 + 4 + 2 + 4 + 4 + 4 + 6, [t["try"] for t in escapes]
        assert [t for t in escapes if t["got_in"]] == [], [t for t in escapes if t["got_in"]]
        assert by_name["own work"]["said"] == "my own file"  # its sandbox, its HOME and its TMPDIR are its own
        refusals = " ".join(t["said"] for t in escapes)
        for expected in ("Permission denied", "Operation not permitted", "NoAuth", "password authentication failed",
                         "not in the whitelist", "401", "403"):
            assert expected in refusals, (expected, refusals[:3000])

        # Its environment holds nothing of any agent's: no value of theirs appears in it.
        task_env = json.loads(by_name["environment"]["said"])
        secrets = _cluster_secrets(home, state)
        agent_values = set()
        for row in json.loads(ctl("dev", "status", "--json").stdout):
            if row["component"] == "agent":
                agent_values |= {v for v in _environ(row["pid"]).values() if len(v) >= 8}
        leaked = {k: v for k, v in task_env.items() if v in agent_values | secrets
                  and k not in ("PATH", "LANG", *environment)}  # not what the test told the tenant itself
        assert leaked == {}, leaked
        assert not [k for k in task_env if k.startswith("PELOTON_") and k not in (
            "PELOTON_JOB_ID", "PELOTON_INSTANCE_ID", "PELOTON_TASK_ID", "PELOTON_SANDBOX")], task_env
        # Nor any process's command line, which every user may read.
        lines = json.loads(by_name["command lines"]["said"])
        assert not [s for s in secrets if any(s in line for line in lines)]

        # Bob's job ran on untouched; he reads his own output, Alice may not.
        status = json.loads(as_bob("job", "status", victim, "--json").stdout)
        assert status["tasks"].get("RUNNING") == 2, status
        assert all(t["run_id"] == 1 for t in json.loads(as_bob("task", "list", victim, "--json").stdout))
        assert as_bob("task", "logs", victim, "0").stdout.strip() == secret
        refused = as_alice("task", "logs", victim, "0")
        assert refused.returncode == 6 and secret not in refused.stdout + refused.stderr
        # A clash with Bob's job id tells Alice only that the id is taken.
        clash = as_alice("job", "create", "/team-a", str(tmp_path / "hostile.yaml"), "-i", victim)
        assert clash.returncode == 2 and f"job id {victim} is taken" in clash.stderr, clash.stderr
        assert "team-b" not in clash.stderr and "RUNNING" not in clash.stderr
        # Nothing of the stack's own files is readable by another user, but what its runs left open.
        exposed = readable_by_others(home)
        assert exposed == [], exposed[:20]
        assert as_bob("job", "stop", victim).returncode == 0
    finally:
        ctl("dev", "down")
        shutil.rmtree(top, ignore_errors=True)


def _environ(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(item.decode(errors="replace").split("=", 1) for item in raw if b"=" in item)


def _cluster_secrets(home: Path, state: dict) -> set[str]:
    """Every password, token and key the stack holds."""
    found = {state[k] for k in ("token", "command_token", "kafka_password", "agent_logs_key", "agent_report_key",
                                "zookeeper_auth") if state.get(k)}
    found |= set(state.get("kafka_users", {}).values()) | set(state.get("command_tokens", {}).values())
    found |= {v for v in json.loads((home / "dev" / "kafka" / "access.json").read_text()).values()
              if isinstance(v, str) and not v.startswith("/")}
    found.add(state["store"].split("//")[1].split("@")[0].split(":")[1])  # the store's password
    return found
