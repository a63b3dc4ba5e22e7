"""The host agent: runs the tasks of one host for the host manager (launch stage)."""
