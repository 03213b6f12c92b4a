"""What stays after a job: the records of kept hosts, shells into them, reaping."""
