"""Parse and validate a Peloton (v0) job config into immutable specs (jobspec.py).

Pure Python: pyyaml only. The input follows Peloton's YAML job files and Peloton's job
semantics. Keys are matched case-insensitively because Peloton's Go CLI
wrote all-lowercase keys (``instancecount``) while its Python tests wrote camelCase
(``instanceCount``). Unknown keys are ignored and null values mean "absent", as in the Go CLI.

Every problem found is collected and reported at once in a single ``JobConfigError``; each
problem reads ``path: message`` where the path uses the lowercased keys of the file, e.g.
``instanceconfig.3.command.value`` or ``defaultconfig.ports[0].envname``.

Everything a later stage evaluates (resources, ports, constraints) is checked here, so
``job validate``, ``job create`` and the stages give the same answer, and no value a file can
hold (an alias bomb, .inf, a huge number) can crash or balloon a process further on.
"""

from __future__ import annotations

import contextlib
from typing import Any

from peloton.model.fields import ROOT, is_integer
from peloton.model.fields import describe as _describe
from peloton.model.fields import join as _join
from peloton.model.fields import mapping as _mapping
from peloton.model.fields import text as _text
from peloton.model.jobfields import (
    Problems,
    read_boolean,
    read_integer,
    read_labels,
    read_list,
    read_mapping,
    read_string,
)
from peloton.model.jobspec import (
    DEFAULT_CONFIG,
    DEFAULT_PLACEMENT_STRATEGY,
    JOB_TYPES,
    MAX_AVRO_INT,
    MAX_INSTANCES,
    PLACEMENT_STRATEGIES,
    JobConfigError,
    JobLimits,
    JobSpec,
    TaskSpec,
    instances_of,
)
from peloton.model.safe_yaml import YamlError, YamlLimits, read_yaml
from peloton.model.stateless import as_v0, is_stateless
from peloton.model.taskconfig import Merged, check_instance, merge_over_default, read_task_config, task_spec

_DEFAULT_LIMITS = JobLimits()  # frozen: one serves every call


def parse_job_config(text: str, limits: JobLimits = _DEFAULT_LIMITS, yaml_limits: YamlLimits = YamlLimits()) -> JobSpec:
    """Parse YAML text; syntax errors and YAML limits passed become a JobConfigError naming the
    line."""
    try:
        doc = read_yaml(text, yaml_limits)
    except YamlError as exc:
        raise JobConfigError([str(exc)]) from None
    return job_spec_from_dict(doc, limits)


def job_spec_from_dict(doc: Any, limits: JobLimits = _DEFAULT_LIMITS) -> JobSpec:
    """Validate an already-loaded document and build the JobSpec.

    The document is trusted to be a bounded tree (as load_yaml gives): no cycles, no nesting
    deeper than Python's recursion."""
    problems = Problems()
    fields = _mapping(doc, ROOT, problems, what="a mapping of job config keys")
    if fields is None:  # mapping() said why
        raise JobConfigError(problems.messages())
    if is_stateless(fields):  # Peloton's stateless JobSpec: read as the v0 config it says
        fields = as_v0(fields, problems)
    return _JobReader(fields, problems, limits).read()


class _JobReader:
    """Reads the top level of one job config; holds the shared problem list."""

    def __init__(self, fields: dict, problems: Problems, limits: JobLimits) -> None:
        self.fields = fields
        self.problems = problems
        self.limits = limits

    def read(self) -> JobSpec:
        f, p = self.fields, self.problems
        job_type = self._job_type()
        instance_count = self._daemon_template() if job_type == "DAEMON" else self._instance_count()
        sla = read_mapping(f, "sla", ROOT, p)
        max_running = read_integer(sla, "maximumrunninginstances", "sla", p)
        min_running = read_integer(sla, "minimumrunninginstances", "sla", p)
        if instance_count is not None:
            self._check_sla(instance_count, max_running, min_running)
        if job_type in ("SERVICE", "DAEMON"):
            self._check_service_sla(sla, job_type)
        if read_list(f, "ldapgroups", ROOT, p):
            p.note("ldapgroups", "not used: access to a job goes by its pool's owningTeam/ldapGroups")
        # Every field is read before raising, so one error lists all the problems.
        spec: dict[str, Any] = dict(
            name=read_string(f, "name", ROOT, p),
            type=job_type,
            instance_count=instance_count,
            owning_team=read_string(f, "owningteam", ROOT, p),
            owner=read_string(f, "owner", ROOT, p),
            description=read_string(f, "description", ROOT, p),
            labels=read_labels(f, "labels", ROOT, p),
            priority=read_integer(sla, "priority", "sla", p, maximum=MAX_AVRO_INT),
            preemptible=read_boolean(sla, "preemptible", "sla", p),
            revocable=read_boolean(sla, "revocable", "sla", p),
            max_running_instances=max_running,
            min_running_instances=min_running,
            max_running_time_s=read_integer(sla, "maxrunningtime", "sla", p, maximum=MAX_AVRO_INT),
            max_unavailable_instances=read_integer(sla, "maximumunavailableinstances", "sla", p, maximum=MAX_INSTANCES),
            placement_strategy=self._placement_strategy(),
            respool=self._respool(),
        )
        default = read_task_config(f[DEFAULT_CONFIG], DEFAULT_CONFIG, p, self.limits) if DEFAULT_CONFIG in f else {}
        overrides = self._instance_configs(instance_count)
        if instance_count is not None:
            spec["tasks"] = self._tasks(instance_count, job_type, default, overrides)
        p.raise_if_any()  # from here on instance_count is known to be valid
        return JobSpec(**spec, notices=tuple(p.notices))

    def _job_type(self) -> str:
        value = self.fields.get("type", 0)
        if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < len(JOB_TYPES):
            return JOB_TYPES[value]
        if isinstance(value, str) and value.upper() in JOB_TYPES:
            return value.upper()
        self.problems.add("type", f"expected one of BATCH (0), SERVICE (1), DAEMON (2), got {_describe(value)}")
        return JOB_TYPES[0]

    def _instance_count(self) -> int | None:
        """None when invalid (already reported): per-instance checks are then skipped."""
        if "instancecount" not in self.fields:
            # Peloton's testjob_base.yaml omits it (its tests filled it in later); a job has
            # at least one instance, so a missing count means 1.
            return 1
        value = self.fields["instancecount"]
        if not is_integer(value):
            self.problems.add("instancecount", f"expected an integer, got {_describe(value)}")
            return None
        if not 1 <= value <= MAX_INSTANCES:
            self.problems.add("instancecount", f"must be between 1 and {MAX_INSTANCES}, got {_describe(value)}")
            return None
        return value

    def _check_sla(self, instance_count: int, max_running: int, min_running: int) -> None:
        if max_running > instance_count:
            self.problems.add(
                "sla.maximumrunninginstances",
                f"must not exceed instancecount ({instance_count}), got {_describe(max_running)}",
            )
        # As in Peloton, a maximum of 0 means "all instances" when checking the minimum.
        effective_max = max_running or instance_count
        if min_running > effective_max:
            limit = "maximumrunninginstances" if max_running else "instancecount"
            self.problems.add(
                "sla.minimumrunninginstances",
                f"must not exceed {limit} ({_describe(effective_max)}), got {_describe(min_running)}",
            )

    def _check_service_sla(self, sla: dict, job_type: str) -> None:
        """Peloton's job validation: a service (and a daemon) runs until stopped, all its instances
        at once, so the batch-only limits make no sense for it; and one that may be revoked must be
        preemptible."""
        for key, name in (("maximumrunninginstances", "maximumRunningInstances"),
                          ("minimumrunninginstances", "minimumRunningInstances"), ("maxrunningtime", "maxRunningTime")):
            if is_integer(sla.get(key)) and sla[key] > 0:
                self.problems.add(f"sla.{key}", f"{name} is for BATCH jobs; a {job_type} job may not set it")
        # Peloton's rule, with its default: preemptible absent is false.
        if sla.get("revocable") is True and sla.get("preemptible") is not True:
            self.problems.add("sla.revocable", f"a revocable {job_type} job must be preemptible (preemptible: true; "
                                               "absent, it is false)")

    def _daemon_template(self) -> int:
        """A DAEMON job's instances are the eligible hosts (peloton.model.daemon): its config is read
        as one instance, the template every host's instance copies."""
        if "instancecount" in self.fields:
            self.problems.note("instancecount", "a DAEMON job runs one instance on every eligible host; its "
                                                "instanceCount is not used")
        if "instanceconfig" in self.fields:
            self.problems.add("instanceconfig", "a DAEMON job's instances are its hosts, each alike: give the task "
                                                "config in defaultConfig")
        return 1

    def _instance_configs(self, instance_count: int | None) -> dict[int, dict[str, Any]]:
        """instanceconfig: {instance id: task config}; ids are ints or strings of digits."""
        if "instanceconfig" not in self.fields:
            return {}
        raw = self.fields["instanceconfig"]
        if not isinstance(raw, dict):
            self.problems.add("instanceconfig", f"expected a mapping of instance ids, got {_describe(raw)}")
            return {}
        out: dict[int, dict[str, Any]] = {}
        for key, config in raw.items():
            instance = self._instance_id(key, instance_count)
            if instance is None:
                continue
            if instance in out:
                self.problems.add(f"instanceconfig.{instance}", "instance given twice")
            if config is not None:  # null: no override
                out[instance] = read_task_config(config, f"instanceconfig.{instance}", self.problems, self.limits)
        return out

    def _instance_id(self, key: Any, instance_count: int | None) -> int | None:
        where = _join("instanceconfig", key)
        # ASCII digits only: str.isdigit() also takes '²', which int() refuses.
        if isinstance(key, str) and key.strip().isascii() and key.strip().isdigit():
            with contextlib.suppress(ValueError):  # more digits than Python converts: reported as not an id below
                key = int(key)
        if not is_integer(key):
            self.problems.add(where, f"expected an instance id (an integer), got {_describe(key)}")
            return None
        # With an invalid instancecount, ids are still bounded: they end up in paths and specs.
        bound = MAX_INSTANCES if instance_count is None else instance_count
        if not 0 <= key < bound:
            self.problems.add(where, f"instance id out of range [0, {bound})")
            return None
        return key

    def _tasks(
        self,
        instance_count: int,
        job_type: str,
        default: dict[str, Any],
        overrides: dict[int, dict[str, Any]],
    ) -> tuple[TaskSpec, ...]:
        base: Merged = {key: (value, DEFAULT_CONFIG) for key, value in default.items()}
        merged_configs = {i: merge_over_default(base, override, f"instanceconfig.{i}")
                          for i, override in overrides.items()}
        plain = [i for i in range(instance_count) if i not in merged_configs]  # no override: the default
        # Only the controller rule looks at the instance (0 or not): the default config clean for
        # the first and the last of its instances is clean for all of them, which are then not
        # checked one by one. Otherwise every instance is, and problems name every instance
        # they hit.
        probe = Problems()
        for instance in sorted({plain[0], plain[-1]}) if plain else ():
            check_instance(instance, base, job_type, probe)
        for instance in (range(instance_count) if probe else sorted(merged_configs)):
            check_instance(instance, merged_configs.get(instance, base), job_type, self.problems)
        if self.problems:
            return ()
        # Instances without an override share one spec, copied with their own instance id.
        alike = iter(instances_of(task_spec(0, base), plain))
        return tuple(task_spec(i, merged_configs[i]) if i in merged_configs else next(alike)
                     for i in range(instance_count))

    def _placement_strategy(self) -> str:
        value = self.fields.get("placementstrategy", 0)
        if value == 0 and not isinstance(value, bool):
            return DEFAULT_PLACEMENT_STRATEGY  # 0 is Peloton's "unset"
        if isinstance(value, int) and not isinstance(value, bool) and value in PLACEMENT_STRATEGIES:
            return PLACEMENT_STRATEGIES[value]
        if isinstance(value, str):
            name = value.upper().removeprefix("PLACEMENT_STRATEGY_")
            if name in PLACEMENT_STRATEGIES.values():
                return name
        self.problems.add(
            "placementstrategy",
            f"expected PACK_HOST (1) or SPREAD_JOB (2), got {_describe(value)}",
        )
        return DEFAULT_PLACEMENT_STRATEGY

    def _respool(self) -> str | None:
        """respoolid: {value: /path} as in Peloton's files, or the path itself."""
        if "respoolid" not in self.fields:
            return None
        raw = self.fields["respoolid"]
        if isinstance(raw, dict):
            fields = _mapping(raw, "respoolid", self.problems) or {}
            path = read_string(fields, "value", "respoolid", self.problems)
        else:
            path = _text(raw, "respoolid", self.problems) or ""
        return path or None
