-- Host pools (Peloton's hostmgr hostpool): the pools an operator made, and each host's pool with
-- the one it is moving to. A host with no row is in the default pool. The API writes the pools,
-- the host manager of the host's shard its members.

-- part: main
CREATE TABLE IF NOT EXISTS host_pools (
    name TEXT PRIMARY KEY, created_ms BIGINT NOT NULL, created_by TEXT NOT NULL DEFAULT '');
CREATE TABLE IF NOT EXISTS host_pool_members (
    host_id TEXT PRIMARY KEY, pool TEXT NOT NULL, desired_pool TEXT NOT NULL, updated_ms BIGINT NOT NULL);
