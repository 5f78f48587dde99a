"""The compiled kernel library: every per-state rigid-body pass, written once as numba functions
on the flat packed model (:mod:`.packing`, MuJoCo-style named columns), one algorithm per file.

The CPU backend (:mod:`dynamics.numba_backend`) runs these passes over batches, split over its
worker threads by :mod:`.threaded_batch`; the GPU backend compiles the same functions as CUDA device functions; the
contact kernels and the solvers' compiled rollouts and Euler-derivative stage call them directly.
Shared pieces: :mod:`.jit` (the one set of compilation options of every numba kernel of the
project, and its on-disk cache stamp), :mod:`.scratch` (declared scratch layouts),
:mod:`.spatial` (6-D spatial algebra), :mod:`.joints` and :mod:`.lie` (joint models, SO(3)/SE(3)),
:mod:`.dense` (Cholesky factorisation and substitution), :mod:`.passive` (the generalised force
``B u - D v - K_s (q - q_spring)``) and :mod:`.integrators` (the semi-implicit Euler step).

Importing this package imports neither numba nor any kernel module.
"""
