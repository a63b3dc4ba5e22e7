"""pelotonctl: the command line people run, one module per command group (job, task, respool,
resmgr, host, cluster, dev, lag, dead-letters, dashboard, bench, agent, stage, topics), all on top
of the core (`peloton`) and the stages. common.py holds what they share, including the exit codes."""

from pelotonctl.cli.main import app, main

__all__ = ["app", "main"]
