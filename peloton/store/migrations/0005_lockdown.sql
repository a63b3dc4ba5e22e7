-- Lockdown: the components of the cluster's job work an operator froze (Peloton's AdminService),
-- read by the API and the job manager.

-- part: main
CREATE TABLE IF NOT EXISTS lockdown (
    component TEXT PRIMARY KEY, locked_ms BIGINT NOT NULL, locked_by TEXT NOT NULL DEFAULT '');
