"""Pre-1.4 SMDDP API: ``parallel.distributed.DistributedDataParallel``."""
