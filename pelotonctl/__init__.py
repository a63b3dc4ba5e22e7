"""The tools people run, on top of the core (`peloton`) and the stages (`stages`): the pelotonctl
command line (cli/), the admin queries it and the dashboard share (admin.py, watch.py), consumer
lag (lag.py), dead letters (deadletters.py), the dashboard (dashboard/), the dev stack and the
servers it starts (dev/), and the benchmarks (bench/)."""
