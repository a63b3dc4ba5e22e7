"""Scheduler model: resources, job configs, state machines. Pure Python, no Kafka."""
