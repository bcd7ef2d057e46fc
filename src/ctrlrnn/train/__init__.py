"""Training: configuration, the loop, checkpoints, logs, reports, multi-process runs."""
