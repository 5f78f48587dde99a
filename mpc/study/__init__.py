"""The MPC-rate study (``mpc-accel study``): sweep tasks × backends × horizons × solvers × latencies
× seeds, one closed-loop run per subprocess, resumable, into one tidy table and plots.

Modules, one concept each: :mod:`.config` (what a study sweeps; flags or TOML), :mod:`.plan`
(the combinations, run identities, backend availability), :mod:`.store` (the study folder, what
counts as finished, write-then-rename), :mod:`.executors` (local subprocess pool, Ray),
:mod:`.worker` (one run, in its own process), :mod:`.table` (the tidy table), :mod:`.plots`, and
:mod:`.runner` (putting them together). See docs/study.md.
"""

from .config import ConfigError, StudyConfig, build_config, load_config
from .plan import RunSpec, plan_runs, split_backends
from .runner import StudyOutcome, run_study, write_outputs

__all__ = ["StudyConfig", "ConfigError", "build_config", "load_config", "RunSpec", "plan_runs", "split_backends",
           "run_study", "write_outputs", "StudyOutcome"]
