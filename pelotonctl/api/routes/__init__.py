"""The API's resources, one router each: probes, jobs, updates, tasks, events (task events as they
happen), respools, hosts, resmgr (the resource manager's tasks and queues), tokens and operations.
Each takes the app's Door through a dependency (pelotonctl.api.door); make_app includes them."""
