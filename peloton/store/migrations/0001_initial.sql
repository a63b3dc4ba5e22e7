-- The schema of the stores made before numbered migrations. A store made then is adopted as at
-- this version: these statements run on it too (IF NOT EXISTS: they make what it lacks, such as
-- PostgreSQL's job_task_specs) and it is given the columns its tables lack (sql/migrate.py).
--
-- `-- part: NAME` starts the statements of the tables kept in one part (sql/base.py): SQLite keeps
-- each part in a file of its own, PostgreSQL all of them in its one database. {blob} and {serial}
-- are the dialect's words (sql/dialect.py).

-- part: main
CREATE TABLE IF NOT EXISTS pools (
    path TEXT PRIMARY KEY, config TEXT NOT NULL, updated_ms BIGINT NOT NULL DEFAULT 0);
CREATE TABLE IF NOT EXISTS jobs (
    job_id TEXT PRIMARY KEY, name TEXT, pool TEXT, type TEXT, state TEXT, instance_count INTEGER,
    priority INTEGER, preemptible BOOLEAN, placement_strategy TEXT, owner TEXT, config_text TEXT,
    created_ms BIGINT, updated_ms BIGINT, completed_ms BIGINT, revocable BOOLEAN, config_version INTEGER,
    rollout TEXT);
CREATE INDEX IF NOT EXISTS jobs_by_completion ON jobs (completed_ms);
CREATE TABLE IF NOT EXISTS tasks (
    job_id TEXT NOT NULL, instance INTEGER NOT NULL, run_id INTEGER NOT NULL, task_id TEXT NOT NULL,
    pool TEXT, gang_id TEXT, state TEXT, spec TEXT, max_failures INTEGER, failures INTEGER,
    host_id TEXT, reason TEXT, message TEXT, exit_code INTEGER, signal INTEGER, updated_ms BIGINT, health TEXT,
    PRIMARY KEY (job_id, instance));
-- Tasks in the states tasks_in_states is asked for (base.INDEXED_STATES) alone: an index over
-- every state rewrote an entry at every status. The query repeats this condition word for word
-- (sql/jobs.py WAITING): SQLite uses a partial index only then.
CREATE INDEX IF NOT EXISTS tasks_waiting_by_state ON tasks (state, updated_ms)
    WHERE (state = 'LAUNCHING' OR state = 'LAUNCHED' OR state = 'STARTING' OR state = 'KILLING');
-- Runs by host once they have one: a new task's empty host takes no place.
CREATE INDEX IF NOT EXISTS tasks_placed_by_host ON tasks (host_id) WHERE host_id != '';
-- The spec a job's alike tasks share, which their rows then hold none of (sql/jobs.py new_task_rows).
CREATE TABLE IF NOT EXISTS job_task_specs (job_id TEXT PRIMARY KEY, spec TEXT NOT NULL);
-- One row per event, as older stores hold them; task_event_batches holds a batch's events of a job.
CREATE TABLE IF NOT EXISTS task_events (
    {serial} task_id TEXT, job_id TEXT, instance INTEGER, run_id INTEGER, state TEXT, reason TEXT,
    exit_code INTEGER, timestamp_ms BIGINT, host_id TEXT, message TEXT);
CREATE INDEX IF NOT EXISTS task_events_by_job ON task_events (job_id);
CREATE TABLE IF NOT EXISTS task_event_batches ({serial} job_id TEXT NOT NULL, events {blob} NOT NULL);
CREATE INDEX IF NOT EXISTS task_event_batches_by_job ON task_event_batches (job_id);
CREATE TABLE IF NOT EXISTS job_commands (command_id TEXT PRIMARY KEY, job_id TEXT, at_ms BIGINT);
CREATE INDEX IF NOT EXISTS job_commands_by_time ON job_commands (at_ms);
CREATE TABLE IF NOT EXISTS refused_commands (
    command_id TEXT PRIMARY KEY, job_id TEXT, pool TEXT, kind TEXT, reason TEXT, at_ms BIGINT);
CREATE INDEX IF NOT EXISTS refused_commands_by_time ON refused_commands (at_ms);
CREATE TABLE IF NOT EXISTS deleted_jobs (job_id TEXT PRIMARY KEY, deleted_ms BIGINT NOT NULL);
CREATE INDEX IF NOT EXISTS deleted_jobs_by_time ON deleted_jobs (deleted_ms);
CREATE TABLE IF NOT EXISTS updates (
    update_id TEXT PRIMARY KEY, job_id TEXT NOT NULL, state TEXT, body TEXT NOT NULL, created_ms BIGINT);
CREATE INDEX IF NOT EXISTS updates_by_job ON updates (job_id, created_ms);
CREATE TABLE IF NOT EXISTS job_configs (
    job_id TEXT NOT NULL, version INTEGER NOT NULL, config_text TEXT NOT NULL, created_ms BIGINT,
    PRIMARY KEY (job_id, version));
CREATE TABLE IF NOT EXISTS host_maintenance (host_id TEXT PRIMARY KEY, state TEXT NOT NULL, updated_ms BIGINT);
CREATE TABLE IF NOT EXISTS tokens (
    token_id TEXT PRIMARY KEY, secret_hash TEXT NOT NULL, user_name TEXT NOT NULL, groups TEXT NOT NULL,
    admin BOOLEAN NOT NULL, created_ms BIGINT NOT NULL, revoked_ms BIGINT);

-- part: allocations
CREATE TABLE IF NOT EXISTS allocations (
    task_id TEXT PRIMARY KEY, pool TEXT, gang_id TEXT, cpu DOUBLE PRECISION, mem_mb DOUBLE PRECISION,
    disk_mb DOUBLE PRECISION, gpu DOUBLE PRECISION, admitted_ms BIGINT, released_ms BIGINT, priority INTEGER,
    preemptible BOOLEAN, revocable BOOLEAN, controller BOOLEAN);
-- Released runs alone, which the sweep forgets by age: held ones are read whole only at start.
CREATE INDEX IF NOT EXISTS allocations_released ON allocations (released_ms) WHERE released_ms IS NOT NULL;
CREATE TABLE IF NOT EXISTS queued_gangs (
    gang_id TEXT PRIMARY KEY, pool TEXT, priority INTEGER, seq BIGINT, gang TEXT, not_before_ms BIGINT,
    admitted_ms BIGINT);

-- part: launches
CREATE TABLE IF NOT EXISTS launches (
    task_id TEXT PRIMARY KEY, job_id TEXT, instance INTEGER, run_id INTEGER, host_id TEXT,
    cpu DOUBLE PRECISION, mem_mb DOUBLE PRECISION, disk_mb DOUBLE PRECISION, gpu DOUBLE PRECISION,
    launched_ms BIGINT, ended_ms BIGINT, final_status TEXT);
-- A launch's host is wanted only while it runs, and its end only once it has ended.
CREATE INDEX IF NOT EXISTS launches_running_by_host ON launches (host_id) WHERE ended_ms IS NULL;
CREATE INDEX IF NOT EXISTS launches_ended ON launches (ended_ms) WHERE ended_ms IS NOT NULL;
