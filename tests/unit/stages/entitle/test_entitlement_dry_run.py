"""The entitlement dry run: a document of pools, usage and capacity in, each pool's entitlement
out, and what is wrong with a bad document."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from peloton.model.resources import EPS
from stages.entitle.entitlement import (
    DryRunError,
    dry_run,
)

# ---- dry run ----------------------------------------------------------------------------------

DRY_RUN = """
capacity: {cpu: 100, memory: 100000, disk: 100000, gpu: 0}
pools:
  - path: /team
    config:                       # camelCase, as in Peloton's respool files
      name: team
      owningTeam: infra
      resources:
        - {kind: cpu, reservation: 40, limit: 80, share: 2}
        - {kind: memory, reservation: 40000, limit: 80000, share: 1}
      slackLimit: {maxPercent: 10}
      controllerLimit: {maxPercent: 50}
  - path: /team/batch
    config:
      resources:
        - {kind: cpu, reservation: 10, limit: 80, share: 1}
        - {kind: memory, reservation: 10000, limit: 80000, share: 1}
  - path: /team/web
    config:
      resources:
        - {kind: cpu, reservation: 20, limit: 40, share: 1, type: 2}
        - {kind: memory, reservation: 20000, limit: 40000, share: 1, type: 2}
usage:
  /default: {demand: {cpu: 20, memory: 1000}}
  /team/batch: {demand: {cpu: 70, memory: 30000}}
"""


def dry_run_doc(peloton_examples: Path) -> dict:
    doc = yaml.safe_load(DRY_RUN)
    default = yaml.safe_load((peloton_examples / "default_respool.yaml").read_text())
    doc["pools"].insert(0, {"path": "/default", "config": default})
    return doc


def test_dry_run(peloton_examples):
    out = dry_run(dry_run_doc(peloton_examples))
    assert list(out) == ["/", "/default", "/team", "/team/batch", "/team/web"]
    assert out["/"]["entitlement"] == {"cpu": 100, "gpu": 0, "memory": 100000, "disk": 100000}
    for shares in out.values():
        assert set(shares) == {"entitlement", "non_slack_entitlement", "slack_entitlement"}
        for r in shares.values():
            assert list(r) == ["cpu", "gpu", "memory", "disk"]

    def ent(path):
        return out[path]["entitlement"]

    # root: /default asks 20 cpu, capped at its limit 12 (= reservation); /team asks 70, 40
    # reserved; 48 left, /team takes its 30; phase 3 offers 6 and 12 of the last 18, both capped
    assert ent("/default") == pytest.approx({"cpu": 12, "gpu": 0, "memory": 6144, "disk": 20480})
    assert ent("/team") == pytest.approx({"cpu": 80, "gpu": 0, "memory": 64500, "disk": 0})
    # /team's 80: /web is STATIC (20 without demand), /batch 10 reserved + all 50 left
    assert ent("/team/batch") == pytest.approx({"cpu": 60, "gpu": 0, "memory": 37250, "disk": 0})
    assert ent("/team/web") == pytest.approx({"cpu": 20, "gpu": 0, "memory": 27250, "disk": 0})
    assert out["/team/batch"]["non_slack_entitlement"] == ent("/team/batch")
    assert out["/team/batch"]["slack_entitlement"] == {"cpu": 0, "gpu": 0, "memory": 0, "disk": 0}


def test_dry_run_usage_parts(peloton_examples):
    doc = dry_run_doc(peloton_examples)
    doc["slack_capacity"] = {"cpu": 8}
    doc["usage"]["/team/web"] = {"slack_demand": {"cpu": 3},
                                 "allocation": {"total": {"cpu": 5}, "slack": {"cpu": 1}}}
    out = dry_run(doc)
    assert out["/"]["slack_entitlement"] == {"cpu": 8, "gpu": 0, "memory": 0, "disk": 0}
    # /web holds 1 revocable cpu (its non-slack allocation is the other 4) and asks 3 more:
    # it keeps the 1 and gets the 3; what nobody asks for is spread by share, and all 8 of the
    # root's go to its children
    assert out["/team/web"]["slack_entitlement"]["cpu"] >= 4 - EPS
    assert sum(out[p]["slack_entitlement"]["cpu"] for p in ("/default", "/team")) == pytest.approx(8)


@pytest.mark.parametrize("change, message", [
    (lambda d: d.pop("capacity"), "capacity: missing"),
    (lambda d: d.update(capacity=[100]), "capacity: expected a mapping"),
    (lambda d: d["capacity"].update(cpu=-1), "capacity.cpu: expected a finite number >= 0, got -1"),
    (lambda d: d["capacity"].update(cpu="lots"), "capacity.cpu: expected a number, got 'lots'"),
    (lambda d: d["capacity"].update(cpu=True), "capacity.cpu: expected a number, got True"),
    (lambda d: d["capacity"].update(cores=4), "capacity: unknown resource kind 'cores'"),
    (lambda d: d.update(slack_capacity={"cpu": float("nan")}), "slack_capacity.cpu: expected a finite number"),
    (lambda d: d["pools"].reverse(), "pools[0] /team/web: its parent /team is not listed before it"),
    (lambda d: d["pools"].append({"path": "/team", "config": {}}), "pools[4] /team: pool /team is listed twice"),
    (lambda d: d["pools"].append({"path": "/", "config": {}}), "the root pool / is the cluster's capacity"),
    (lambda d: d["pools"].append({"path": "/x"}), "pools[4] /x.config: expected a pool config mapping"),
    (lambda d: d["pools"].append({"path": "/x", "config": {}, "parent": "/"}), "pools[4]: unknown key 'parent'"),
    (lambda d: d["pools"][1]["config"]["resources"][0].update(limit=1),
     "pool /team: invalid config:\n  resources[0]: limit 1.0 is below reservation 40.0"),
    (lambda d: d["usage"].update({"/nowhere": {}}), "usage /nowhere: no such pool"),
    (lambda d: d["usage"].update({"/team": {}}), "usage /team: not a leaf pool"),
    (lambda d: d["usage"]["/team/batch"].update(demand={"cpu": -3}),
     "usage /team/batch.demand.cpu: expected a finite number >= 0, got -3"),
    (lambda d: d["usage"]["/team/batch"].update(demand={"mem": 3}),
     "usage /team/batch.demand: unknown resource kind 'mem'"),
    (lambda d: d["usage"]["/team/batch"].update(allocation={"used": {}}),
     "usage /team/batch.allocation: unknown key 'used'"),
    (lambda d: d.update(extra=1), "input: unknown key 'extra'"),
])
def test_dry_run_errors(peloton_examples, change, message):
    doc = dry_run_doc(peloton_examples)
    change(doc)
    with pytest.raises(DryRunError) as caught:
        dry_run(doc)
    assert message in str(caught.value)


def test_dry_run_accepts_camel_case_keys(peloton_examples):
    doc = dry_run_doc(peloton_examples)
    doc["slackCapacity"] = {"CPU": 8}
    doc["usage"]["/team/web"] = {"slackDemand": {"cpu": 3}, "allocation": {"nonSlack": {"memory": 5}}}
    out = dry_run(doc)
    assert out["/"]["slack_entitlement"]["cpu"] == 8
