"""The host side of an accelerator backend (``gpu``, ``fpga-sim``): what the accelerator does not
compute runs on the fastest CPU path.

An accelerator backend computes its kernels (the gradients, above all) on the device or its
emulation; everything else a solver does — the line-search rollouts, the cost terms, the Riccati
pass, the glue — is host work. With ``host="numba"`` (the default where numba is installed) the
backend says so through the public :class:`~dynamics.backend.Backend` capabilities: it prefers a
compiled solver and hands out the numba backend's compiled forward dynamics, frame kinematics and
contact dynamics (the kernel library's host functions), so the solvers take the same compiled
paths as with the numba backend and a study row differs from numba's only by what the accelerator
computes (Plancher et al., "Accelerating Robot Dynamics Gradients on a CPU, GPU, and FPGA", 2021:
the CPU rolls out, the accelerator computes the gradients). With ``host="python"`` the solvers run
their Python reference loops (what these backends did before there was a choice).
"""

from __future__ import annotations

import importlib.util

from .backend import Backend, BackendUnavailableError
from .model import RobotModel

#: where the host side of an accelerator backend runs
HOSTS = ("numba", "python")


def resolve_host(host: str | None, backend: str) -> str:
    """The host setting for ``backend`` (its name, for messages): ``None`` is ``"numba"`` when numba
    is installed, else ``"python"``; an unknown value raises ValueError and ``"numba"`` without
    numba BackendUnavailableError, each naming the fix."""
    numba_here = importlib.util.find_spec("numba") is not None
    if host is None:
        return "numba" if numba_here else "python"
    if host not in HOSTS:
        raise ValueError(f"{backend} backend: host must be one of {', '.join(HOSTS)}, got {host!r}")
    if host == "numba" and not numba_here:
        raise BackendUnavailableError(f"{backend} backend: host='numba' needs the 'numba' package (pip install "
                                      f"numba), or pass host='python'")
    return host


class CompiledHost:
    """Mix-in (before :class:`~dynamics.backend.Backend`) for an accelerator backend whose host side
    runs on the numba backend when ``self.host == "numba"`` (set it with :func:`resolve_host` in
    ``__init__``). Overrides the compiled-solver capabilities only; the accelerator's own kernels
    are the subclass's."""

    host: str = "python"
    _host_cpu: Backend | None = None

    @property
    def prefers_compiled_solver(self) -> bool:   # the Backend attribute, per instance
        return self.host == "numba"

    def host_backend(self) -> Backend | None:
        """The numba backend that runs this backend's host side, or None with ``host="python"``."""
        if self.host != "numba":
            return None
        if self._host_cpu is None:
            from .numba_backend import NumbaBackend
            self._host_cpu = NumbaBackend()
        return self._host_cpu

    def compiled_forward_dynamics(self, model: RobotModel):
        """The numba backend's (host rollouts), or None with ``host="python"``."""
        cpu = self.host_backend()
        return None if cpu is None else cpu.compiled_forward_dynamics(model)

    def compiled_kinematics(self, model: RobotModel):
        """The numba backend's (host cost terms), or None with ``host="python"``."""
        cpu = self.host_backend()
        return None if cpu is None else cpu.compiled_kinematics(model)

    def compiled_contact_dynamics(self, model: RobotModel, contacts):
        """The numba backend's (host contact rollouts), or None with ``host="python"``."""
        cpu = self.host_backend()
        return None if cpu is None else cpu.compiled_contact_dynamics(model, contacts)
