"""What a job is, before anything runs: the request, its profile, framework and instance types, the
toolkit model, the plan and the result."""
