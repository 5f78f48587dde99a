"""The ``mujoco`` backend: forward and inverse dynamics from MuJoCo itself, first-order derivatives
by central differences of MuJoCo's ``mj_forward`` / ``mj_inverse`` (what MuJoCo MPC does for its
derivative-based planners), batched by a loop over the knots on one private ``MjData``.

What it is for: the study's "what MJPC does" row, and a cross-check of our dynamics by an
independent implementation. What it is not: fast (each state is a Python loop of C calls) nor
second-order (no analytical tensors; :meth:`Backend.supports` says so).

MuJoCo is set up so that its equations of motion are exactly our rigid-body dynamics (the
backend's private copy of the model, never the caller's): constraints (contacts, joint limits,
friction loss, equalities), springs, dampers, actuators and fluid forces are disabled. Passive
forces and actuation are the action models' business (``τ = B u + τ_passive``,
:mod:`dynamics.actuation`), so ``tau`` goes in as ``qfrc_applied``, never through ``ctrl``.
Free-joint quantities are mapped through ``qvel = T v`` (docs/conventions.md): MuJoCo keeps the
free-joint linear velocity in world axes, we in body axes.

Derivatives (``[output, variable]``, q along ``q ⊕ δ`` in our tangent space):
``∂a/∂q``, ``∂a/∂v`` (and ``∂τ/∂q``, ``∂τ/∂v``) are central differences with step ``fd_step``
(default 1e-5: MJPC uses 1e-6, where rounding already dominates — worst error on Atlas 1.3e-6 at
1e-6 against 1.1e-7 at 1e-5, measured against the numpy reference), the q steps taken by the
model's own ``integrate`` (our right perturbations; MuJoCo's ``mj_integratePos`` steps a free
joint's position in world axes, which would give derivatives in another tangent basis); v steps reuse MuJoCo's position stage
(``mj_forwardSkip`` / ``mj_inverseSkip`` with ``mjSTAGE_POS``). ``∂a/∂τ = M⁻¹`` is exact
(``mj_solveM``: a is affine in τ). Declared tolerance against the numpy reference:
:attr:`MujocoBackend.rtol`.

Kinematics (placements, Jacobians, centre of mass) are the numpy reference's functions: the
costs evaluate them, and MuJoCo's would be the same math (checked in the MuJoCo oracle tests).
"""

from __future__ import annotations

import copy

import numpy as np

from ..backend import Backend
from ..model import RobotModel, UnsupportedModelError, import_mujoco


class _Session:
    """The backend's private MjModel (rigid-body dynamics only) and MjData for one RobotModel."""

    def __init__(self, model: RobotModel):
        mujoco = import_mujoco()
        m = copy.deepcopy(model.mj_model)
        for _, va in model.free_adr:
            if np.any(m.dof_armature[va:va + 6] != 0):
                raise UnsupportedModelError(
                    f"model '{model.name}': armature on a free joint; MuJoCo applies it in world axes and "
                    f"the dynamics layer in body axes (docs/conventions.md). Remove it to use the 'mujoco' backend")
        D = mujoco.mjtDisableBit
        m.opt.disableflags |= int(D.mjDSBL_CONSTRAINT | D.mjDSBL_CONTACT | D.mjDSBL_LIMIT | D.mjDSBL_EQUALITY
                                  | D.mjDSBL_FRICTIONLOSS | D.mjDSBL_SPRING | D.mjDSBL_DAMPER
                                  | D.mjDSBL_ACTUATION)
        m.opt.density = 0.0      # no fluid forces
        m.opt.viscosity = 0.0
        self.mujoco = mujoco
        self.model = model
        self.m = m
        self.d = mujoco.MjData(m)
        self.pos_stage = int(mujoco.mjtStage.mjSTAGE_POS)
        self.free = bool(model.free_adr)
        self.eye = np.eye(model.nv)
        # bodies that move (a force on a body welded to the world does nothing)
        self.moving_bodies = [b for b in range(1, model.nbody) if model.body_link[b] >= 0]

    def set_position(self, q: np.ndarray) -> None:
        """qpos = q and MuJoCo's position stage (kinematics, inertia and its factorisation)."""
        self.d.qpos[:] = q
        self.mujoco.mj_fwdPosition(self.m, self.d)

    def external_qfrc(self, fext: np.ndarray, out: np.ndarray) -> np.ndarray:
        """``Σ_b J_bᵀ f_b`` in MuJoCo's coordinates (nv,) at the current position stage, fext (nbody,
        6) = (force, torque) in each body's frame at its origin (docs/conventions.md)."""
        out[:] = 0.0
        d = self.d
        for b in self.moving_bodies:
            f = fext[b]
            if f[0] or f[1] or f[2] or f[3] or f[4] or f[5]:
                R = d.xmat[b].reshape(3, 3)
                self.mujoco.mj_applyFT(self.m, d, R @ f[:3], R @ f[3:], d.xpos[b], b, out)
        return out

    def dynamics(self, q: np.ndarray, v: np.ndarray, x: np.ndarray, fext: np.ndarray | None, inverse: bool,
                 same_q: bool = False) -> np.ndarray:
        """Forward dynamics ``a`` (x = τ) or inverse dynamics ``τ`` (x = a) of P states q (P, nq),
        v, x (P, nv) [, fext (nbody, 6) shared], (P, nv) in our coordinates. same_q: every row has
        q[0]'s configuration (one position stage for all)."""
        model, mj, m, d = self.model, self.mujoco, self.m, self.d
        P, nv = q.shape[0], model.nv
        if self.free:
            qvel = model.qvel_from_v(q, v)
            inp = model.qacc_from_a(q, v, x) if inverse else model.qfrc_from_tau(q, x)
        else:
            qvel, inp = v, x
        out = np.empty((P, nv))
        ext = np.zeros(nv)
        for p in range(P):
            if p == 0 or not same_q:
                self.set_position(q[p])
                if fext is not None:
                    self.external_qfrc(fext, ext)
            d.qvel[:] = qvel[p]
            if inverse:
                d.qacc[:] = inp[p]
                mj.mj_inverseSkip(m, d, self.pos_stage, 1)
                out[p] = d.qfrc_inverse
                if fext is not None:
                    out[p] -= ext
            else:
                d.qfrc_applied[:] = inp[p]
                if fext is not None:
                    d.qfrc_applied[:] += ext
                mj.mj_forwardSkip(m, d, self.pos_stage, 1)
                out[p] = d.qacc
        if not self.free:
            return out
        return model.tau_from_qfrc(q, out) if inverse else model.a_from_qacc(q, v, out)

    def velocity_map(self, q: np.ndarray) -> np.ndarray | None:
        """``T`` (B, nv, nv) with ``qvel = T v``, None when it is the identity (no free joint)."""
        if not self.free:
            return None
        B, nv = q.shape[0], self.model.nv
        Tt = self.model.qvel_from_v(np.repeat(q, nv, axis=0), np.tile(self.eye, (B, 1))).reshape(B, nv, nv)
        return np.swapaxes(Tt, 1, 2)

    def mass_matrices(self, q: np.ndarray, inverse: bool) -> np.ndarray:
        """M(q) or M(q)⁻¹ (B, nv, nv) in our coordinates: ``Tᵀ M_mj T`` (T orthogonal, so the inverse
        is ``Tᵀ M_mj⁻¹ T``); the inverse by MuJoCo's sparse factorisation (``mj_solveM``)."""
        mj, m, d = self.mujoco, self.m, self.d
        B, nv = q.shape[0], self.model.nv
        out = np.empty((B, nv, nv))
        for b in range(B):
            self.set_position(q[b])
            if inverse:
                mj.mj_solveM(m, d, out[b], self.eye)
            else:
                mj.mj_fullM(m, d, out[b])
        T = self.velocity_map(q)
        if T is None:
            return out
        return np.swapaxes(T, 1, 2) @ out @ T


class MujocoBackend(Backend):
    """Dynamics from MuJoCo (``mj_forward``, ``mj_inverse``, ``mj_fullM``, ``mj_solveM``) and
    first-order derivatives by central differences of them; see the module docstring.

    fd_step: the central-difference step for q (tangent) and v [rad, m, rad/s, m/s]. One private
    MjData per robot model: an instance must not be called from several threads at once."""

    name = "mujoco"
    #: central differences at the default step are good to ~1e-9 (iiwa, HyQ) and ~1e-7 (Atlas, the
    #: worst conditioned M) relative to max(1, |ref|); 1e-5 is that with a margin. Dynamics
    #: (aba, rnea, crba, minv) agree with the numpy reference to rounding (≤ 1e-12, MuJoCo oracle tests).
    rtol: float = 1e-5

    def __init__(self, fd_step: float = 1e-5):
        if not (isinstance(fd_step, (int, float)) and 0.0 < fd_step < 1e-2):
            raise ValueError(f"MujocoBackend: fd_step must be a float in (0, 1e-2), got {fd_step!r}")
        import_mujoco()   # fails here, at construction, where MuJoCo cannot load
        self.fd_step = float(fd_step)
        self._sessions: dict[int, _Session] = {}
        from ..numpy_backend import NumpyBackend
        self._kinematics = NumpyBackend()

    def _session(self, model: RobotModel) -> _Session:
        s = self._sessions.get(id(model))
        if s is None or s.model is not model:
            s = _Session(model)
            self._sessions[id(model)] = s
        return s

    # ------------------------------------------------------------ dynamics (MuJoCo)
    def _rnea(self, model, q, v, a, fext):
        s = self._session(model)
        return np.stack([s.dynamics(q[b:b + 1], v[b:b + 1], a[b:b + 1], None if fext is None else fext[b], True)[0]
                         for b in range(q.shape[0])]) if q.shape[0] else np.zeros((0, model.nv))

    def _aba(self, model, q, v, tau, fext):
        s = self._session(model)
        if fext is None:
            return s.dynamics(q, v, tau, None, False)
        return np.stack([s.dynamics(q[b:b + 1], v[b:b + 1], tau[b:b + 1], fext[b], False)[0]
                         for b in range(q.shape[0])]) if q.shape[0] else np.zeros((0, model.nv))

    def _crba(self, model, q):
        return self._session(model).mass_matrices(q, inverse=False)

    def _minv(self, model, q):
        return self._session(model).mass_matrices(q, inverse=True)

    # ------------------------------------------------------------ derivatives (central differences)
    def _central_differences(self, model, q, v, x, fext, inverse):
        """``(∂y/∂q, ∂y/∂v)`` (B, nv, nv) each of y = aba (inverse False) or rnea (True)."""
        s = self._session(model)
        B, nv, h = q.shape[0], model.nv, self.fd_step
        steps = np.concatenate([self.fd_step * s.eye, -self.fd_step * s.eye])      # (2 nv, nv)
        dq, dv = np.empty((B, nv, nv)), np.empty((B, nv, nv))
        for b in range(B):
            fe = None if fext is None else fext[b]
            qb = np.broadcast_to(q[b], (2 * nv, model.nq))
            vb = np.broadcast_to(v[b], (2 * nv, nv))
            xb = np.broadcast_to(x[b], (2 * nv, nv))
            yq = s.dynamics(model.integrate(qb, steps), vb, xb, fe, inverse)
            yv = s.dynamics(np.ascontiguousarray(qb), vb + steps, xb, fe, inverse, same_q=True)
            dq[b] = (yq[:nv] - yq[nv:]).T / (2 * h)
            dv[b] = (yv[:nv] - yv[nv:]).T / (2 * h)
        return dq, dv

    def _rnea_derivatives(self, model, q, v, a, fext):
        return self._central_differences(model, q, v, a, fext, inverse=True)

    def _aba_derivatives(self, model, q, v, tau, fext, minv):
        if minv is None:
            dq, dv = self._central_differences(model, q, v, tau, fext, inverse=False)
            return dq, dv, self._minv(model, q)
        # a given M⁻¹ is used as the other backends use it (Dadu-RBD's ΔiFD): ∂a/∂x = -M⁻¹ ∂τ/∂x at
        # a = aba(q, v, τ), the ∂τ/∂x by central differences of mj_inverse
        a = self._aba(model, q, v, tau, fext)
        tq, tv = self._central_differences(model, q, v, a, fext, inverse=True)
        mi = np.array(minv, dtype=float)
        return -mi @ tq, -mi @ tv, mi

    # no analytical second order: supports() is False and the public methods raise NotImplementedError
    _rnea_second_derivatives = None
    _aba_second_derivatives = None

    # ------------------------------------------------------------ kinematics (the numpy reference's)
    def _frame_placement(self, model, q, frame):
        return self._kinematics._frame_placement(model, q, frame)

    def _body_placements(self, model, q):
        return self._kinematics._body_placements(model, q)

    def _site_placements(self, model, q):
        return self._kinematics._site_placements(model, q)

    def _frame_jacobian(self, model, q, frame, reference):
        return self._kinematics._frame_jacobian(model, q, frame, reference)

    def _frame_jacobian_time_variation(self, model, q, v, frame, reference):
        return self._kinematics._frame_jacobian_time_variation(model, q, v, frame, reference)

    def _center_of_mass(self, model, q):
        return self._kinematics._center_of_mass(model, q)

    def _com_jacobian(self, model, q):
        return self._kinematics._com_jacobian(model, q)
