"""admit: the job manager. Validates and persists jobs, expands them into tasks and gangs, and
drives task and job lifecycle from status events (retries, releases)."""
