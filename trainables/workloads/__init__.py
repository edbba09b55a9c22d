"""What the loop trains: the workload protocol (`workload_protocol`, `workload_fields`), a workload loaded and
checked before any work (`workload`, `workload_probe`, `preflight`), the job built from it (`workload_job`),
the built-in hybrid LM (`hybrid_workload`), a user's code and folder (`user_code`, `user_folder`) and the
loss tolerance a workload declares (`loss_tolerance`)."""
