-- Indexes over every row, which each write kept up to date for reads that want some rows only,
-- or for no read at all: jobs by state, tasks by state, by task id and by host, allocations by
-- release, launches by host, by job and by end. Stores made before numbered migrations have some
-- of them (PostgreSQL's all); the partial indexes of 0001 serve those reads. allocations_released
-- is made again: PostgreSQL's was over every row.

-- part: main
DROP INDEX IF EXISTS jobs_by_state;
DROP INDEX IF EXISTS tasks_by_state;
DROP INDEX IF EXISTS tasks_by_task_id;
DROP INDEX IF EXISTS tasks_by_host;

-- part: allocations
DROP INDEX IF EXISTS allocations_by_release;
DROP INDEX IF EXISTS allocations_released;
CREATE INDEX allocations_released ON allocations (released_ms) WHERE released_ms IS NOT NULL;

-- part: launches
DROP INDEX IF EXISTS launches_by_host;
DROP INDEX IF EXISTS launches_by_job;
DROP INDEX IF EXISTS launches_by_end;
