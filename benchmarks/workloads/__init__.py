"""Training scripts the benchmarks run (copied into a job's source dir; not imported)."""
