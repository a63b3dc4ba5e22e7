"""Peloton's `job stateless replace-diff`: which instances a new spec adds, removes, updates and
leaves alone, computed as the job manager's update computes them."""

from __future__ import annotations

from pelotonctl.cli.stateless import replace_diff

SPEC = """name: web
instanceCount: {count}
defaultSpec:
  containers:
  - resource: {{cpuLimit: 0.1, memLimitMb: 32, diskLimitMb: 10}}
    entrypoint: {{value: sleep, arguments: ["{seconds}"]}}
"""


def test_a_grown_job_with_a_new_entrypoint_updates_every_old_instance_and_adds_the_new() -> None:
    diff = replace_diff(SPEC.format(count=3, seconds=100), SPEC.format(count=5, seconds=200))
    assert diff == {"instances_added": [3, 4], "instances_removed": [], "instances_updated": [0, 1, 2],
                    "instances_unchanged": []}


def test_a_shrunk_job_with_the_same_spec_removes_and_leaves_the_rest_alone() -> None:
    diff = replace_diff(SPEC.format(count=3, seconds=100), SPEC.format(count=2, seconds=100))
    assert diff == {"instances_added": [], "instances_removed": [2], "instances_updated": [],
                    "instances_unchanged": [0, 1]}
