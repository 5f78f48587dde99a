"""Semi-implicit (symplectic) Euler: ``v⁺ = v + dt a``, ``q⁺ = q ⊕ (dt v⁺)`` (Crocoddyl's
``IntegratedActionModelEuler``), with ``a`` free or contact dynamics
(:mod:`solvers.integrators.actuated`).

First order: the acceleration partials over all knots in one bound backend call, plus the model's
``integrate_jacobians``; on a backend that prefers compiled solver kernels, the step's inputs and
Jacobians are assembled by two compiled calls around it: :mod:`solvers.euler_numba` on hinge/slide
robots with free dynamics, :mod:`solvers.euler_lie_numba` (the SO(3)/SE(3) step and its Jacobians)
on robots with ball/free joints, free or on contacts. Second order, in the factored form of
:class:`~solvers.integrators.base.DynamicsDerivatives`: with ``w = dt v⁺``,

    F2_v = dt Ha,   F2_q = Jw (dt² Ha) + G (the SO(3)/SE(3) integration terms, Lie rows only)

factored as ``T = (Ha, G_lie)``, ``C = ([dt² Jwᵀ | dt I], [E_lie | 0])`` (R = nv + Lie dofs rows),
``Ha`` the acceleration Hessian (:meth:`ActuatedModel._acceleration_hessian`, or the compiled
assembly) and ``G`` from :func:`solvers.integrators.lie.lie_integration_terms`. With free dynamics on
a backend that gives the bracketed terms ``B`` of ``∂²a = −M⁻¹ B``
(:attr:`~solvers.integrators.acceleration.FreeAcceleration.bracket_second_order`), ``T``'s first nv
rows hold the same assembly of ``B`` (``Ha = −M⁻¹ Hb``) and ``C``'s first nv rows are
``−M⁻¹ᵀ [dt² Jwᵀ | dt I]``: the same ``F2`` without the backend's four nv⁴ ``−M⁻¹`` products
(docs/second_order.md).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dynamics.inputs import sum_is_finite
from dynamics.kernels.packing import as_kernel_input

from .actuated import ActuatedModel, StateBuffers
from .base import IntegratedData
from .lie import integrate_state, lie_blocks, lie_integration_terms


@dataclass(eq=False)
class EulerData(IntegratedData):
    """:class:`IntegratedData` plus the knots' states and acceleration partials (``states``), the
    next velocity ``vn`` and step ``w = dt v⁺`` (n, nv), the integration Jacobians ``Jq``, ``Jw``
    (n, nv, nv) and next configurations ``qn`` (n, nq) on robots with ball/free joints, and with
    second order on an analytical backend the backend's tensors ``A2`` (4, n, nv, nv, nv)."""

    states: StateBuffers | None = None
    vn: np.ndarray | None = None
    w: np.ndarray | None = None
    Jq: np.ndarray | None = None
    Jw: np.ndarray | None = None
    qn: np.ndarray | None = None
    A2: np.ndarray | None = None

    def arrays(self) -> dict[str, np.ndarray]:
        out = super().arrays()
        out.update(self.states.arrays())
        out.update({"vn": self.vn, "w": self.w})
        out.update({k: a for k, a in (("Jq", self.Jq), ("Jw", self.Jw), ("qn", self.qn), ("A2", self.A2))
                    if a is not None})
        return out


class EulerModel(ActuatedModel):
    """Semi-implicit Euler over ``dt`` seconds (module docstring)."""

    integrator = "euler"

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        m = self.model
        self._lie_blocks = lie_blocks(m)
        self._lie_dofs = (np.concatenate([np.arange(va, va + n) for va, n, _ in self._lie_blocks])
                          if self._lie_blocks else np.zeros(0, dtype=int))
        self._kernels = None
        self._lie_kernel = None
        #: T holds the Hessian of the bracketed terms and C the −M⁻¹ (module docstring)
        self._fold = self.acc.bracket_second_order
        self._step = None                   # _compiled_step, looked up on first use
        if self.backend.prefers_compiled_solver and (self.contacts is None or not self._euclidean):
            from .. import euler_numba
            sl = np.asarray(self._spring_links, dtype=np.int64)
            springs = np.stack([np.asarray(m.link_qadr)[sl], np.asarray(m.link_dofadr)[sl]],
                               axis=-1).astype(np.int64).reshape(-1, 2)
            self._kernels = (euler_numba, np.ascontiguousarray(self.B, dtype=float), bool(self._B_identity),
                             np.ascontiguousarray(self.damping, dtype=float), springs,
                             np.ascontiguousarray(self.stiffness, dtype=float),
                             np.ascontiguousarray(m.qpos_spring, dtype=float))
            if not self._euclidean:
                # ball/free joints (free or contact dynamics): the inputs as above, the assembly
                # with the Lie-group step and its Jacobians in one compiled call
                from dynamics.kernels.lie import joint_rows

                from .. import euler_lie_numba
                self._lie_kernel = (euler_lie_numba.euler_lie_jacobians, joint_rows(m))

    def _compiled_step(self):
        """``(integrate_with_jacobians_batch, joint rows)`` of the backend's compiled kinematics for a
        robot with ball/free joints (the configuration step and its Jacobians in one compiled call),
        or None where the backend has none; looked up once."""
        if self._step is None:
            ck = self.backend.compiled_kinematics(self.model) if self.backend.prefers_compiled_solver else None
            fn = getattr(ck, "integrate_with_jacobians_batch", None)
            self._step = (fn, ck.joint_rows) if fn is not None else False
        return self._step or None

    def _compiled_euler(self):
        """``(euler_numba, B, B is I, damping, springs, stiffness, q_spring)``: the compiled
        assembly of a hinge/slide robot with free dynamics and its arguments, or None where it does
        not apply (contacts, ball/free joints, a backend that does not prefer compiled solver
        kernels)."""
        return None if self._lie_kernel is not None else self._kernels

    def _compiled_lie_euler(self):
        """``(euler_lie_jacobians, joint rows)``: the compiled assembly of a robot with ball/free
        joints (free or contact dynamics; its inputs from :func:`solvers.euler_numba.euler_inputs`),
        or None where it does not apply (hinge/slide robots, a backend that does not prefer
        compiled solver kernels)."""
        return self._lie_kernel

    @property
    def second_order_rows(self) -> int:
        return self.model.nv + self._lie_dofs.size

    # ------------------------------------------------------------ data
    def _make_data(self, n, xnext, Fx, Fu) -> EulerData:
        nv = self.model.nv
        Jq, Jw, qn = (None, None, None) if self._euclidean else \
            (np.empty((n, nv, nv)), np.empty((n, nv, nv)), np.empty((n, self.model.nq)))
        return EulerData(xnext, Fx, Fu, states=self._state_buffers(n), vn=np.empty((n, nv)), w=np.empty((n, nv)),
                         Jq=Jq, Jw=Jw, qn=qn)

    def enable_second_order(self, data: EulerData) -> None:
        if data.factors is None:
            n, nv, R, nz = data.n, self.model.nv, self.second_order_rows, self.ndx + self.nu
            data.factors = (np.zeros((n, R, self.ndx)), np.empty((n, R, nz, nz)))
            if self.acc.analytical_second_order:
                data.A2 = np.empty((4, n, nv, nv, nv))

    def contact_solve(self, data: EulerData):
        return data.states.acc.contact

    # ------------------------------------------------------------ f(x, u)
    def step(self, x: np.ndarray, u: np.ndarray, forces: np.ndarray | None = None) -> np.ndarray:
        """:meth:`IntegratedModel.step`; on a contact model the contact forces of the step's own
        solve go into ``forces`` (..., nc) when given (what a line search's costs and constraints
        read instead of solving again)."""
        q, v = self._split(np.asarray(x, float))
        vn = v + self.dt * self.acc.value(q, v, self.torques(q, v, np.asarray(u, float)), forces)
        w = self.dt * vn
        step = None if self._euclidean or q.ndim != 2 else self._compiled_step()
        if step is not None and sum_is_finite(q) and sum_is_finite(w):
            # the derivative stage's compiled q ⊕ w (its Jacobians are computed too and dropped:
            # still cheaper than the numpy Lie step on a floating base)
            n, nv = q.shape[0], vn.shape[-1]
            qn = np.empty(q.shape)
            step[0](step[1], as_kernel_input(q), as_kernel_input(w), qn, np.empty((n, nv, nv)), np.empty((n, nv, nv)))
            return np.concatenate([qn, vn], axis=-1)
        return integrate_state(self.model, q, w, vn, self._euclidean)

    # ------------------------------------------------------------ derivatives
    def _calc_first_order(self, data: EulerData, x: np.ndarray, u: np.ndarray) -> None:
        m, dt = self.model, self.dt
        nq, nv = m.nq, m.nv
        N, ndx = x.shape[0], 2 * nv
        s = data.states
        q, v, tau = s.q, s.v, s.tau
        xn, Fx, Fu = data.xnext, data.Fx, data.Fu
        if self._kernels is not None:
            # the same step in two compiled calls around the backend's
            kern, B, b_identity, damping, springs, stiffness, qspring = self._kernels
            kern.euler_inputs(x, u, B, b_identity, damping, springs, stiffness, qspring, q, v, tau)
            s.acc.run()         # a, ∂a/∂q, ∂a/∂v, ∂a/∂τ (M⁻¹ for free dynamics) into the buffers
            D = s.acc.partials
            if self._lie_kernel is None:
                kern.euler_jacobians(q, v, s.acc.a, D[0], D[1], D[2], B, b_identity, damping, stiffness, dt, xn, Fx,
                                     Fu)
                return
            lie_jacobians, joints = self._lie_kernel
            if lie_jacobians(joints, q, v, s.acc.a, D[0], D[1], D[2], B, b_identity, damping, stiffness, dt, data.vn,
                             data.w, data.qn, data.Jq, data.Jw, xn, Fx, Fu):
                return
            # a state that is not finite: the numpy path below, which reports it
        q[...] = x[:, :nq]
        v[...] = x[:, nq:]
        self.torques(q, v, u, out=tau, tmp=data.vn)
        a, Aq, Av, Au = self._accel_partials(s)
        vn = np.multiply(a, dt, out=data.vn)
        vn += v
        w = np.multiply(vn, dt, out=data.w)
        # Fx = ∂x⁺/∂x (N, ndx, ndx), Fu = ∂x⁺/∂u (N, ndx, nu), rows (q⁺, v⁺)
        dvx, dvu = Fx[:, nv:], Fu[:, nv:]                                   # ∂v⁺/∂z = dt [Aq, Av, Au] + [0, I, 0]
        np.multiply(Aq, dt, out=dvx[..., :nv])
        np.multiply(Av, dt, out=dvx[..., nv:])
        np.multiply(Au, dt, out=dvu)
        flat = Fx.reshape(N, ndx * ndx)
        flat[:, nv * ndx + nv::ndx + 1] += 1.0                               # + I on the ∂v⁺/∂v block
        xn[:, nq:] = vn
        if self._euclidean:
            # q⁺ = q + w, w = dt v⁺: ∂q⁺/∂z = dt ∂v⁺/∂z + [I, 0, 0] = dt² [Aq, Av, Au] + [I, dt I, 0],
            # from the partials (reading dvx while writing Fx would make numpy copy Fx first)
            dt2 = dt * dt
            np.multiply(Aq, dt2, out=Fx[:, :nv, :nv])
            np.multiply(Av, dt2, out=Fx[:, :nv, nv:])
            np.multiply(Au, dt2, out=Fu[:, :nv])
            flat[:, 0:nv * ndx:ndx + 1] += 1.0                               # + I on ∂q⁺/∂q
            flat[:, nv:nv * ndx:ndx + 1] += dt                               # + dt I on ∂q⁺/∂v
            np.add(q, w, out=xn[:, :nq])
        else:
            Jq, Jw = data.Jq, data.Jw
            step = self._compiled_step()
            if step is not None and sum_is_finite(q) and sum_is_finite(w):
                qn = data.qn
                step[0](step[1], as_kernel_input(q), as_kernel_input(w), qn, Jq, Jw)
            else:                            # numpy: also its errors on non-finite input
                Jq[...], Jw[...] = m.integrate_jacobians(q, w)
                qn = m.integrate(q, w)
            np.matmul(Jw, dt * dvx, out=Fx[:, :nv])                         # ∂q⁺/∂z through w = dt v⁺
            np.matmul(Jw, dt * dvu, out=Fu[:, :nv])
            Fx[:, :nv, :nv] += Jq
            xn[:, :nq] = qn

    def _calc_second_order(self, data: EulerData, x: np.ndarray, u: np.ndarray) -> None:
        m, dt = self.model, self.dt
        nv = m.nv
        s = data.states
        q, v, tau = s.q, s.v, s.tau
        T = data.factors[1]
        H = T[:, :nv]
        if self._kernels is not None and data.A2 is not None:
            # the backend writes its tensors into A2 and one compiled call assembles Ha from them
            kern, B, b_identity, damping, _, stiffness, _ = self._kernels
            self.acc.second_order_tensors(q, v, tau, out=data.A2, bracket=self._fold)
            kern.acceleration_hessian(data.A2, B, b_identity, damping, stiffness, H)
        else:
            self._acceleration_hessian(q, v, tau, out=H, tensor_out=data.A2, bracket=self._fold)
        self.write_factor_C(data)
        lie = self._lie_dofs
        if lie.size:
            W = dt * np.concatenate([data.Fx[:, nv:], data.Fu[:, nv:]], axis=-1)   # ∂w/∂z = dt ∂v⁺/∂z
            T[:, nv:] = lie_integration_terms(m, self._lie_blocks, q, data.w, data.Jq, data.Jw, W)

    def write_factor_C(self, data: EulerData) -> None:
        """The factor ``C`` (N, R, ndx) of the second-order term into ``data.factors[0]``: the rows
        of the acceleration Hessian map through ``∂q⁺/∂v⁺ = dt² I`` (``dt² Jwᵀ`` on Lie-group joints)
        and ``∂v⁺/∂v⁺ = dt I``, the Lie-group rows through the identity. With the fold (module
        docstring) the acceleration rows are ``−M⁻¹ᵀ`` times those, ``M⁻¹`` the first-order
        evaluation's ``∂a/∂τ`` (so written after it, at every evaluation); without it constant on
        a hinge/slide robot (the prepared iteration then writes it once)."""
        C = data.factors[0]
        nv, dt = self.model.nv, self.dt
        lie = self._lie_dofs
        if self._fold:
            Minv = data.states.acc.partials[2]
            if self._kernels is not None:
                Jw = _NO_JW if self._euclidean else data.Jw
                self._kernels[0].folded_factor_C(Minv, Jw, dt, C)
            else:
                MiT = np.swapaxes(Minv, -1, -2)
                if self._euclidean:
                    np.multiply(MiT, -dt * dt, out=C[:, :nv, :nv])
                else:
                    np.matmul(MiT, np.swapaxes(data.Jw, -1, -2), out=C[:, :nv, :nv])
                    C[:, :nv, :nv] *= -dt * dt
                np.multiply(MiT, -dt, out=C[:, :nv, nv:])
            C[:, nv:] = 0.0
        else:
            C.fill(0.0)
            ar = np.arange(nv)
            if self._euclidean:
                C[:, ar, ar] = dt * dt
            else:
                C[:, :nv, :nv] = dt * dt * np.swapaxes(data.Jw, -1, -2)
            C[:, ar, nv + ar] = dt
        if lie.size:
            C[:, nv + np.arange(lie.size), lie] = 1.0

    def fold_call(self, data: EulerData):
        """``(folded_factor_C, args)``: the compiled call that writes ``data``'s factor C with the
        fold on a hinge/slide robot (what :meth:`write_factor_C` runs there), or None without the
        fold or the compiled assembly (C is then constant)."""
        if not self._fold or self._kernels is None or not self._euclidean:
            return None
        return self._kernels[0].folded_factor_C, (data.states.acc.partials[2], _NO_JW, float(self.dt), data.factors[0])


#: ``Jw = I`` for :func:`solvers.euler_numba.folded_factor_C` (hinge/slide robots)
_NO_JW = np.zeros((0, 0, 0))
