"""The training loop (`loop`, knowing nothing of Ray) and what it uses: one optimizer step of a model
(`step_model`), the timed window and its step timer (`timing`), the memory cap (`memory`), micro-batches
(`micro_batches`), the fp32 evaluation (`evaluation`), the profile and FLOPs of a run (`profile`, `flops`),
the CPU load beside it (`cpu_load`), its result record (`result`), the compile caches (`compile_cache`,
`cache_use`) and the timing gate its timed windows queue at (`gate`, Ray's actor)."""
