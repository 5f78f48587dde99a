"""The compiled kernel library: every per-state rigid-body pass, written once as numba functions
on the flat packed model (:mod:`.packing`, MuJoCo-style named columns), one algorithm per file.

The CPU backend (:mod:`dynamics.numba_backend`) runs these passes over batches with
``numba.prange``; the GPU backend compiles the same functions as CUDA device functions; the
contact kernels and the solvers' compiled rollout and Euler-derivative stages call them directly.
Shared pieces: :mod:`.jit` (the one decorator and the on-disk cache stamp), :mod:`.spatial`
(6-D spatial algebra), :mod:`.joints` and :mod:`.lie` (joint models, SO(3)/SE(3)).

Importing this package imports neither numba nor any kernel module.
"""
