"""K rollouts stepped by MuJoCo itself (``mujoco.rollout``, threaded), with the simulator's own
contact model: the sampling planners' ``rollout="mujoco"`` option, so a legged robot can be planned
without a contact schedule (the problem's knots give only the costs and the knot spacing).

Each knot spacing dt is ``dt / timestep`` MuJoCo steps with the knot's control held (MJPC's
planners also hold the spline's value over physics steps); a feedback policy is evaluated once per
knot at the rollouts' states. States are converted to the model's convention (free-joint linear
velocity in body axes, :mod:`dynamics.mujoco_state`); controls go to MuJoCo's ``ctrl`` through the
actuator map. MuJoCo's contact warm start is not carried from the measured state (it is not part
of the state x).
"""

from __future__ import annotations

import numpy as np

from dynamics.model import import_mujoco
from dynamics.mujoco_state import ActuatorMap, write_state

from ..problem import ShootingProblem


class MujocoRollout:
    """``rollout(problem, us, out, feedback)`` with :func:`~solvers.sampling.rollout_batch`'s contract
    (us (K, N, nu) spline values or controls, overwritten with the applied controls; out (K, N+1, nx)
    states; a diverged rollout is NaN from there on), stepped by MuJoCo on the problem model's own
    scene. threads: MjData instances stepping in parallel (``mujoco.rollout``'s thread pool)."""

    def __init__(self, problem: ShootingProblem, threads: int = 1):
        mujoco = import_mujoco()
        from mujoco import rollout as mj_rollout
        m = problem.model
        self.mj_model = m.mj_model
        ts = float(self.mj_model.opt.timestep)
        dts = np.asarray(problem.dts, float)
        steps = np.rint(dts / ts).astype(int)
        if (steps < 1).any() or np.abs(steps * ts - dts).max() > 1e-9:
            raise ValueError(f"rollout='mujoco' needs knot spacings that are whole multiples of MuJoCo's timestep "
                             f"{ts:g} s, got {sorted(set(np.round(dts, 9).tolist()))}; pick dt accordingly")
        if isinstance(threads, bool) or not isinstance(threads, (int, np.integer)) or threads < 1:
            raise ValueError(f"rollout threads must be an integer >= 1, got {threads!r}")
        self.steps = steps
        self.model = m
        self.amap = ActuatorMap.for_model(m)
        self._mujoco, self._rollout = mujoco, mj_rollout
        self._spec = mujoco.mjtState.mjSTATE_FULLPHYSICS
        self._datas = [mujoco.MjData(self.mj_model) for _ in range(int(threads))]
        self.nstate = mujoco.mj_stateSize(self.mj_model, self._spec)
        self._q0 = mujoco.mj_stateSize(self.mj_model, mujoco.mjtState.mjSTATE_TIME)
        self._ctrl0 = np.array(self._datas[0].ctrl)      # actuators the model does not drive keep their value

    def initial_state(self, x: np.ndarray) -> np.ndarray:
        """MuJoCo's full physics state (nstate,) of the model state x (nq+nv,) at time 0."""
        d = self._datas[0]
        write_state(self.model, d, x)
        d.time = 0.0
        s = np.empty(self.nstate)
        self._mujoco.mj_getState(self.mj_model, d, s, self._spec)
        return s

    def states(self, s: np.ndarray) -> np.ndarray:
        """Model states (K, nq+nv) of MuJoCo full physics states s (K, nstate)."""
        m = self.model
        q = s[:, self._q0:self._q0 + m.nq]
        qvel = s[:, self._q0 + m.nq:self._q0 + m.nq + m.nv]
        return np.concatenate([q, m.v_from_qvel(q, qvel)], axis=1)

    def __call__(self, problem: ShootingProblem, us: np.ndarray, out: np.ndarray, feedback=None) -> np.ndarray:
        K, N, nq = us.shape[0], problem.horizon, problem.model.nq
        out[:, 0] = problem.x0
        state = np.tile(self.initial_state(problem.x0), (K, 1))
        ctrl = np.tile(self._ctrl0, (K, 1))
        ids, gain = self.amap.ids, self.amap.gain
        with np.errstate(over="ignore", invalid="ignore"):
            for t in range(N):
                x = out[:, t]
                if feedback is not None:
                    us[:, t] = problem.clip_controls(feedback.controls(us[:, t], x[:, :nq], x[:, nq:]))
                ctrl[:, ids] = us[:, t] / gain
                traj, _ = self._rollout.rollout(self.mj_model, self._datas, state, ctrl[:, None, :],
                                                nstep=int(self.steps[t]))
                state = traj[:, -1]
                out[:, t + 1] = self.states(state)
                bad = ~np.isfinite(out[:, t + 1]).all(axis=1)
                if bad.any():
                    out[bad, t + 1:] = np.nan
                    state = state.copy()
                    state[bad] = np.nan_to_num(state[bad])   # MuJoCo must not see NaN; the rows stay NaN in out
        return out
