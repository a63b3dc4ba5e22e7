"""The host runtime: what runs a task on a host, used by the launch stage's in-process hosts and by
each host's agent. driver.py is the contract (requests, updates, Mesos states); local.py runs real
processes and is composed of the rest (sandboxes, accounts, environments, executors, pid files,
orphans, cgroups, containers, GPUs, health checks, exits); sim.py simulates hosts at scale."""
