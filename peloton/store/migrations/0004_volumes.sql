-- Persistent volumes of stateful tasks: one per instance that asks for one, on the host where
-- its first run was launched (the host manager records it), kept until deleted.

-- part: main
CREATE TABLE IF NOT EXISTS volumes (
    volume_id TEXT PRIMARY KEY, job_id TEXT NOT NULL, instance INTEGER NOT NULL, host_id TEXT NOT NULL,
    container_path TEXT NOT NULL, size_mb INTEGER NOT NULL, state TEXT NOT NULL, created_ms BIGINT NOT NULL,
    updated_ms BIGINT NOT NULL);
CREATE INDEX IF NOT EXISTS volumes_by_job ON volumes (job_id);
