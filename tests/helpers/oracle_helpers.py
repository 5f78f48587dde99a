"""Oracle helpers shared by the oracle tests and ``benchmarks/oracle_errors.py`` (not a test module).

Numerical differentiation (tests/dynamics/test_derivatives_numerical.py, tests/solvers/test_second_order.py):

* ``H_FD``, ``H_CS``, ``H_FD2`` — steps of first-order central differences (1e-6), of the complex
  step (1e-20) and of second-order central differences (1e-5).
* ``perturbed_q(model, q, step)`` — the configurations ``q ⊕ step·e_j`` for every tangent
  direction j (complex ``step`` for complex step).
* ``fd(f, model, args, which)`` — central difference of a batched public function along every
  tangent direction of ``args[which]`` (the configuration when ``which == 0``).
* ``cs(kernel, model, args, which)`` — the same by complex step of a flat-batch numpy kernel.
* ``rnea_second_numerical(model, q, v, a, fext, method)`` — central differences or complex step of
  the numpy backend's ``rnea_derivatives`` and ``crba``: (d2tau_dq2, d2tau_dv2, d2tau_dqdv, dM_dq).

MuJoCo oracle (tests/dynamics/test_oracle_mujoco.py); these import mujoco only when called:

* ``oracle_mjmodel(mj)`` — a copy of an MjModel whose dynamics are plain rigid-body dynamics.
* ``mj_frames(model)`` — (name, MuJoCo object type, id) of every named site and body of a RobotModel.
* ``mj_frame_jacobian(m, d, typ, i)`` — MuJoCo's Jacobian of such a frame (mj_jacSite / mj_jacBody)
  and the frame's rotation.
"""

from __future__ import annotations

import copy

import numpy as np

import dynamics
from dynamics import joints

BE = dynamics.get_backend("numpy")
H_FD = 1e-6    # first-order central differences
H_CS = 1e-20   # complex step
H_FD2 = 1e-5   # second-order central differences (of the analytical first-order derivatives)


# ---------------------------------------------------------------- first-order numerical differentiation
def perturbed_q(model, q, step):
    """Configurations ``q ⊕ step·e_j`` for j = 0..nv-1, (nv, nq); complex ``step`` for complex step."""
    nv = model.nv
    Q = np.repeat(np.asarray(q)[None], nv, axis=0).astype(np.result_type(q, step))
    return joints.integrate(model, Q, step * np.eye(nv))


def fd(f, model, args: tuple, which: int):
    """Central difference of ``f(*args)`` along every tangent direction of ``args[which]``.

    f is a batched public function; the result has the derivative variable as its last axis."""
    nv = model.nv
    rep = [np.broadcast_to(a, (nv,) + np.shape(a)) if a is not None else None for a in args]

    def at(step):
        r = list(rep)
        if which == 0:  # the configuration
            r[0] = perturbed_q(model, args[0], step)
        else:
            r[which] = args[which] + step * np.eye(nv)
        return f(*r)
    plus, minus = at(H_FD), at(-H_FD)
    return np.moveaxis((plus - minus) / (2 * H_FD), 0, -1)


def cs(kernel, model, args: tuple, which: int):
    """Complex-step derivative of a flat-batch numpy kernel ``kernel(model, *args)`` (batch = direction)."""
    nv = model.nv
    rep = [None if a is None else np.repeat(np.asarray(a)[None], nv, axis=0).astype(complex) for a in args]
    if which == 0:
        rep[0] = perturbed_q(model, args[0], 1j * H_CS)
    else:
        rep[which] = rep[which] + 1j * H_CS * np.eye(nv)
    out = kernel(model, *rep)
    return np.moveaxis(np.imag(out) / H_CS, 0, -1)


# ---------------------------------------------------------------- second-order numerical differentiation
def rnea_second_numerical(model, q, v, a, fext, method):
    """Finite-Diff-2 / complex step of ``rnea_derivatives`` and ``crba`` (Singh, Russell & Wensing 2022 App. A.II.2):
    ``T[b, i, j, k] = ∂_k (∂_j τ_i)`` with the k-perturbation ``q ⊕ δ e_k`` applied first.

    ``method`` is ``"central"`` (step ``H_FD2``) or ``"complex"`` (step ``H_CS``); batched q, v, a
    (B, ·), fext (B, nbody, 6) or None. Returns (d2tau_dq2, d2tau_dv2, d2tau_dqdv, dM_dq)."""
    B, nv = q.shape[0], model.nv
    E = np.eye(nv)
    steps = (H_FD2, -H_FD2) if method == "central" else (1j * H_CS,)
    dq_q, dq_v, dv_v, M_q = [], [], [], []
    for s in steps:
        dq = (E * s)[None].repeat(B, 0)                                      # (B, k, nv)
        Q = dynamics.joints.integrate(model, np.repeat(q[:, None], nv, 1).reshape(-1, model.nq).astype(complex),
                                      dq.reshape(-1, nv)).reshape(B, nv, model.nq)
        Q0 = np.repeat(q[:, None], nv, 1).astype(complex)
        V0 = np.repeat(v[:, None], nv, 1).astype(complex)
        A0 = np.repeat(a[:, None], nv, 1).astype(complex)
        F0 = None if fext is None else np.repeat(fext[:, None], nv, 1).astype(complex)
        if method == "central":
            Q, Q0, V0, A0 = Q.real, Q0.real, V0.real, A0.real
            F0 = None if F0 is None else F0.real
        d_q = BE.rnea_derivatives(model, Q, V0, A0, F0)
        d_v = BE.rnea_derivatives(model, Q0, V0 + dq, A0, F0)
        dq_q.append(d_q[0])
        dq_v.append(d_v[0])
        dv_v.append(d_v[1])
        M_q.append(BE.crba(model, Q))

    def diff(x):  # (B, k, i, j) -> (B, i, j, k)
        d = (x[0] - x[1]) / (2 * H_FD2) if method == "central" else x[0].imag / H_CS
        return np.moveaxis(d, 1, -1)

    return diff(dq_q), diff(dv_v), diff(dq_v), diff(M_q)


# ---------------------------------------------------------------- MuJoCo oracle
def oracle_mjmodel(mj: "mujoco.MjModel") -> "mujoco.MjModel":  # noqa: F821
    """A private copy of ``mj`` whose dynamics are plain rigid-body dynamics: constraints (contacts,
    limits, friction loss), springs, dampers and actuators disabled."""
    import mujoco
    m = copy.deepcopy(mj)
    D = mujoco.mjtDisableBit
    m.opt.disableflags |= int(D.mjDSBL_CONSTRAINT | D.mjDSBL_SPRING | D.mjDSBL_DAMPER | D.mjDSBL_ACTUATION)
    # MuJoCo applies free-joint armature in world axes, we would in body axes (docs/conventions.md)
    for j in range(m.njnt):
        if m.jnt_type[j] == mujoco.mjtJoint.mjJNT_FREE:
            m.dof_armature[m.jnt_dofadr[j]:m.jnt_dofadr[j] + 6] = 0.0
    return m


def mj_frames(model):
    """(name, MuJoCo object type, id) of every named site and body (a site wins a name clash)."""
    import mujoco
    out = [(n, mujoco.mjtObj.mjOBJ_SITE, s) for s, n in enumerate(model.site_names) if n]
    out += [(n, mujoco.mjtObj.mjOBJ_XBODY, b) for b, n in enumerate(model.body_names)
            if b > 0 and n and n not in model.site_names]
    return out


def mj_frame_jacobian(m, d, typ, i):
    """``(J, R)`` of the frame ``(typ, i)`` of ``mj_frames``: ``J = [lin; ang]`` (6, nv) from
    mj_jacSite / mj_jacBody (world axes, at the frame origin, per MuJoCo ``qvel``), R its rotation."""
    import mujoco
    jp, jr = np.zeros((3, m.nv)), np.zeros((3, m.nv))
    if typ == mujoco.mjtObj.mjOBJ_SITE:
        mujoco.mj_jacSite(m, d, jp, jr, i)
        R = d.site_xmat[i].reshape(3, 3)
    else:
        mujoco.mj_jacBody(m, d, jp, jr, i)
        R = d.xmat[i].reshape(3, 3)
    return np.vstack([jp, jr]), R
