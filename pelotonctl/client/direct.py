"""The cluster reached directly: the store read, commands published to Kafka, by this process."""

from __future__ import annotations

import os
from functools import cached_property
from pathlib import Path

from peloton.config import Settings
from pelotonctl import admin, host_pools, queries, volumes
from pelotonctl import lockdown as lockdowns
from pelotonctl.admin import NotFound, UserError
from pelotonctl.queries import JobQuery, TaskQuery
from pelotonctl.shapes import event_row, job_info, job_row, task_info, token_row, update_info
from pelotonctl.watch import job_summary
from stages.admit.workflow import UpdateOptions


class DirectClient:
    def __init__(self, settings: Settings):
        self.settings = settings

    @cached_property
    def store(self):
        from peloton.store import open_store

        return open_store(self.settings.store)

    # -- jobs ---------------------------------------------------------------------------------
    def submit_job(self, pool: str, text: str, job_id: str | None = None) -> str:
        return admin.submit_job(self.settings, self.store, pool, text, job_id)

    def control_job(self, kind: str, job_id: str, instances: str | None = None, batch_size: int = 0,
                    config: str | None = None, options: UpdateOptions | None = None) -> dict:
        if kind == "DELETE":
            return self.delete_job(job_id)
        return admin.control_job(self.settings, self.store, kind, job_id, instances, batch_size, config,
                                 options=options)

    def delete_job(self, job_id: str, keep_volumes: bool = False) -> dict:
        """The job deleted, and its persistent volumes unless kept (volumes_deleted, volumes_kept)."""
        answer = admin.control_job(self.settings, self.store, "DELETE", job_id)
        return {**answer, **volumes.job_deleted_volumes(self.settings, self.store, job_id, keep_volumes)}

    def job(self, job_id: str, version: int | None = None) -> dict | None:
        job = self.store.get_job(job_id)
        if job is None and version is not None:
            raise NotFound(f"no job {job_id}")
        return job_info(self.store, job, version, self.settings.job_retention_s) if job else None

    # -- updates ------------------------------------------------------------------------------
    def updates(self, job_id: str) -> list[dict]:
        if self.store.get_job(job_id) is None:
            raise NotFound(f"no job {job_id}")
        return [update_info(u) for u in self.store.updates_of_job(job_id)]

    def update(self, update_id: str) -> dict:
        wf = self.store.get_update(update_id)
        if wf is None:
            raise NotFound(f"no update {update_id}")
        return update_info(wf)

    def steer_update(self, update_id: str, action: str) -> dict:
        return admin.steer_update(self.settings, self.store, update_id, action)

    def job_summary(self, job_id: str, why: bool = True) -> dict | None:
        return job_summary(self.store, job_id, self.settings if why else None)

    def query_jobs(self, query: JobQuery) -> list[dict]:
        return [job_row(j) for j in queries.query_jobs(self.store, query)]

    # -- tasks --------------------------------------------------------------------------------
    def tasks(self, job_id: str) -> list[dict] | None:
        """None: no such job."""
        job = self.store.get_job(job_id)
        return (queries.query_tasks(self.store, job, TaskQuery(limit=None))[0] or None) if job else None

    def task_listing(self, job_id: str) -> dict | None:
        """Every task of the job ({"tasks", "total"}; the stages' words are the API's, so none
        here); None: no such job."""
        job = self.store.get_job(job_id)
        if job is None:
            return None
        rows, total = queries.query_tasks(self.store, job, TaskQuery(limit=None))
        return {"tasks": rows, "total": total}

    def query_tasks(self, job_id: str, query: TaskQuery) -> dict:
        """{"tasks": the page, "total": how many match}."""
        job = self.store.get_job(job_id)
        if job is None:
            raise NotFound(f"no job {job_id}")
        rows, total = queries.query_tasks(self.store, job, query)
        return {"tasks": rows, "total": total}

    def task(self, job_id: str, instance: int) -> dict | None:
        task = next((t for t in self.store.tasks_of_job(job_id) if t.instance == instance), None)
        return task_info(job_id, task) if task else None

    def task_events(self, job_id: str, instance: int) -> list[dict] | None:
        if self.store.get_job(job_id) is None:
            return None
        return [event_row(e) for e in self.store.task_events(job_id) if e["instance"] == instance]

    def task_log(self, job_id: str, instance: int, run: int | None = None, stderr: bool = False) -> bytes:
        """A run's stdout (or stderr) from its sandbox on this machine (no API: nothing else to ask)."""
        from peloton.host.sandboxes import sandbox_path

        task = self.task(job_id, instance)
        if task is None:
            raise NotFound(f"no instance {instance} of job {job_id}")
        run_id = run or task["run_id"]
        if not 1 <= run_id <= task["run_id"]:
            raise NotFound(f"instance {instance} of job {job_id} has runs 1-{task['run_id']}")
        task_id = f"{job_id}-{instance}-{run_id}"
        path = sandbox_path(Path(self.settings.home) / "sandboxes", task_id) / ("stderr" if stderr else "stdout")
        if not path.exists():
            where = f" (it ran on host {task['host']})" if task["host"] and run_id == task["run_id"] else ""
            raise NotFound(f"no {'stderr' if stderr else 'stdout'} of task {task_id} on this machine{where}: a "
                                 "task that has not started, or ran on a simulated host or another machine, has none "
                                 "here (through the API, agents serve their hosts' logs)")
        return path.read_bytes()

    # -- tokens (in the store: the operator's way in, before any token exists) -----------------
    def issue_token(self, user: str, groups: list[str], admin: bool) -> dict:
        from peloton.auth.tokens import issue
        from peloton.runtime import now_ms

        try:
            token, row = issue(user, groups, admin, now_ms())
        except ValueError as exc:
            raise UserError(str(exc)) from None
        self.store.add_token(row)
        return {"token": token, **token_row(row)}

    def revoke_token(self, token_id: str) -> None:
        from peloton.runtime import now_ms

        if not self.store.revoke_token(token_id, now_ms()):
            raise NotFound(f"no token {token_id} that is not revoked already")

    def list_tokens(self) -> list[dict]:
        return [token_row(t) for t in self.store.list_tokens()]

    # -- pools and hosts ----------------------------------------------------------------------
    def create_pool(self, path: str, text: str) -> dict:
        return admin.create_pool(self.settings, self.store, path, text)

    def update_pool(self, path: str, text: str, force: bool = False) -> dict:
        return admin.update_pool(self.settings, self.store, path, text, force)

    def delete_pool(self, path: str) -> None:
        admin.delete_pool(self.settings, self.store, path)

    def pool_report(self, path: str) -> dict:
        return admin.pool_report(self.settings, self.store, path)

    def pool_tree(self) -> dict:
        from peloton.model.pool import pool_tree

        return pool_tree(self.store.list_pools())

    def hosts(self, states: list[str] | None = None) -> list[dict]:
        rows = [h for h in admin.list_hosts(self.settings) if not states or h["state"] in states]
        return admin.with_drain_waits(self.settings, self.store, rows)

    # -- the resource manager's view ----------------------------------------------------------
    def resmgr_tasks(self, job_id: str | None = None, pool: str | None = None,
                     states: list[str] | None = None) -> list[dict]:
        return queries.resmgr_tasks(self.store, job_id, pool, states or ())

    def pending_gangs(self, pool: str | None = None, limit: int = 100) -> list[dict]:
        return queries.pending_gangs(self.store, pool, limit)

    def maintenance(self, host_id: str, action: str, force: bool = False) -> None:
        admin.request_maintenance(self.settings, host_id, action, "", force)

    def lockdown(self) -> dict[str, dict]:
        return lockdowns.lockdown(self.store)

    def set_locks(self, components: list[str], locked: bool) -> dict:
        return lockdowns.set_locks(self.store, components, locked, os.environ.get("USER", ""))

    def host_pools(self) -> list[dict]:
        return host_pools.list_host_pools(self.settings, self.store)

    def create_host_pool(self, name: str) -> dict:
        return host_pools.create_host_pool(self.settings, self.store, name)

    def delete_host_pool(self, name: str) -> list[str]:
        return host_pools.delete_host_pool(self.settings, self.store, name)

    def change_host_pool(self, host_id: str, pool: str, source: str = "") -> dict:
        return host_pools.change_host_pool(self.settings, self.store, host_id, pool, source)

    # -- persistent volumes -------------------------------------------------------------------
    def volumes(self, job_id: str | None = None) -> list[dict]:
        rows = volumes.list_volumes(self.store, job_id)
        if job_id and not rows and self.store.get_job(job_id) is None:
            raise NotFound(f"no job {job_id}")
        return rows

    def volume(self, volume_id: str) -> dict:
        return volumes.get_volume(self.store, volume_id)

    def delete_volume(self, volume_id: str) -> dict:
        return volumes.delete_volume(self.settings, self.store, volume_id)

    # -- what operators watch: lag, dead letters, the instance registry ---------------------------
    def lag(self, stages: tuple[str, ...], window: int) -> dict:
        """One sample of the stage groups' lag; the monitor (and its status windows) lives as long
        as this client, in a process of its own (`lag --watch` runs through broker restarts)."""
        from pelotonctl.lag_child import LagInChild

        if getattr(self, "_lag", None) is None:
            self._lag = LagInChild(self.settings, window)
        return self._lag.sample(stages, window)

    def dead_letters(self, since_ms: int | None = None, stage: str | None = None) -> list[dict]:
        from pelotonctl.deadletters import list_letters

        return list_letters(self.settings, since_ms, stage)

    def dead_letter(self, number: str) -> dict:
        from pelotonctl.deadletters import find_letter, show

        return show(find_letter(self.settings, number))

    def replay_dead_letter(self, number: str, value: dict | None = None, sets: dict[str, str] | None = None,
                           schema: str | None = None) -> dict:
        from pelotonctl.deadletters import find_letter, replay

        return replay(self.settings, find_letter(self.settings, number), value, sets, schema)

    def instances(self, timeout: float = 5.0) -> list[dict]:
        """Every instance registered in ZooKeeper (PELOTON_ZOOKEEPER)."""
        from peloton.registry import Registry, RegistryUnavailable

        hosts = self.settings.zookeeper.strip()
        if not hosts:
            raise RegistryUnavailable(
                "PELOTON_ZOOKEEPER is not set: set it to the ZooKeeper the cluster registers in (e.g. "
                "zk1:2181,zk2:2181, optionally ending in a chroot path such as /peloton); for a local dev "
                "stack `pelotonctl dev status` shows what runs (`dev up --store postgres` or `--store cassandra` "
                "starts a ZooKeeper)")
        with Registry(hosts, timeout=timeout, auth=self.settings.zookeeper_auth) as registry:
            return registry.instances()

    def close(self) -> None:
        if getattr(self, "_lag", None) is not None:
            self._lag.close()
            self._lag = None
