"""Observers of a running job (only the supervisor imports them): faults, stacks, collectives, quiet
failures, quirks, the timeline, topology and the SMDDP report."""
