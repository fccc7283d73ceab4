"""Rollout stage: async Ray workers run groups of memory-agent rollouts into a bounded buffer.

The learner's interface is `RolloutService(cfg, rows).start()` then `take(n_groups)` and
`push_weights(path, version)`; evaluation streams groups with `run_groups(cfg, rows, ...)`.
Heavy imports (Ray, engines) stay in the submodules.
"""
