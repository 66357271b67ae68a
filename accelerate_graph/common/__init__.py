"""Shared plumbing that knows nothing of graphs: domain errors and their first lines (errors), atomic
file writes (atomic_io), comma-separated option lists, devices and dtypes, the environment a plan
records, source locations for messages, and the --debug switch."""
