"""``fpga-sim``: fixed-point datapath emulation of a dynamics-gradient accelerator with a
cycle-level timing model (Plancher et al. 2021; Yang, Chen & Han 2023). See docs/fpga_sim.md.

>>> import dynamics
>>> from dynamics.fpga_sim import AcceleratorDesign
>>> d = AcceleratorDesign(dynamics.load_model("iiwa"), forward_pes=7, backward_pes=7, block_size=7)
>>> d.latency_cycles
34
>>> be = dynamics.get_backend("fpga-sim", design=d, fmt="Q16.16")

Modules: :mod:`.fixed_point` (Qm.n arithmetic), :mod:`.datapath` (the Table I functions in fixed
point), :mod:`.schedule` (task graphs and list scheduling), :mod:`.timing` (the accelerator
model), :mod:`.backend` (the ``dynamics.Backend``).
"""

from .backend import FpgaSimBackend, LastTiming
from .fixed_point import FixedPointOverflowError, OverflowCounter, QFormat
from .timing import AcceleratorDesign, DesignPoint, IOLink, KnotTime, schedule_tree

__all__ = ["FpgaSimBackend", "LastTiming", "AcceleratorDesign", "DesignPoint", "IOLink", "KnotTime", "QFormat",
           "OverflowCounter", "FixedPointOverflowError", "schedule_tree"]
