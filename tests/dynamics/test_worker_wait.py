"""dynamics.worker_wait: libgomp's workers get a short bounded spin (OMP_WAIT_POLICY=PASSIVE,
GOMP_SPINCOUNT=30000) where the user chose nothing, applied when the numba backend first starts
numba's thread pool (before libgomp loads), never on ``import dynamics``; a user's setting of
either variable is never overridden."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from dynamics import worker_wait as ww


@pytest.fixture
def clean(monkeypatch):
    monkeypatch.delenv(ww.SPIN_VARIABLE, raising=False)
    monkeypatch.delenv(ww.POLICY_VARIABLE, raising=False)
    monkeypatch.setattr(ww, "_set_by_us", {})
    monkeypatch.setattr(ww, "_applied", None)
    monkeypatch.setattr(ww, "_libgomp_loaded", lambda: False)
    return monkeypatch


def test_short_spin_when_nothing_is_chosen(clean):
    assert ww.configure_worker_wait() == {"OMP_WAIT_POLICY": "PASSIVE", "GOMP_SPINCOUNT": "30000"}
    assert os.environ["GOMP_SPINCOUNT"] == "30000" and os.environ["OMP_WAIT_POLICY"] == "PASSIVE"
    assert ww.worker_wait_status() == "GOMP_SPINCOUNT=30000 (mpc-accel), OMP_WAIT_POLICY=PASSIVE (mpc-accel)"


def test_users_spin_count_wins(clean):
    clean.setenv("GOMP_SPINCOUNT", "0")
    assert ww.configure_worker_wait() == {"OMP_WAIT_POLICY": "PASSIVE"}
    assert os.environ["GOMP_SPINCOUNT"] == "0"
    assert ww.worker_wait_status() == "GOMP_SPINCOUNT=0 (user), OMP_WAIT_POLICY=PASSIVE (mpc-accel)"


def test_users_policy_wins_and_decides_the_spin(clean):
    clean.setenv("OMP_WAIT_POLICY", "active")
    assert ww.configure_worker_wait() == {}
    assert os.environ["OMP_WAIT_POLICY"] == "active" and "GOMP_SPINCOUNT" not in os.environ
    assert ww.worker_wait_status() == "OMP_WAIT_POLICY=active (user)"


def test_too_late_once_libgomp_is_loaded(clean):
    clean.setattr(ww, "_libgomp_loaded", lambda: True)
    assert ww.configure_worker_wait() == {}
    assert "GOMP_SPINCOUNT" not in os.environ and "OMP_WAIT_POLICY" not in os.environ
    assert ww.worker_wait_status() == "libgomp default (libgomp was loaded before mpc-accel could configure it)"


def test_status_before_the_workers_start(clean):
    assert "not configured yet" in ww.worker_wait_status()


def test_applied_once_per_process(clean):
    ww.configure_before_workers_start()
    assert os.environ["GOMP_SPINCOUNT"] == "30000"
    clean.setenv("GOMP_SPINCOUNT", "5")    # a later change by the user is not overwritten
    ww.configure_before_workers_start()
    assert os.environ["GOMP_SPINCOUNT"] == "5"


def _run(code: str, **env_extra: str) -> list[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY")}
    env.update(env_extra)
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.split()


_SHOW = ("print(os.environ.get('GOMP_SPINCOUNT'), os.environ.get('OMP_WAIT_POLICY'), "
         "_libgomp_loaded() in (False, None))")


def test_importing_dynamics_leaves_the_environment_untouched():
    code = ("import os; before = dict(os.environ); import dynamics, dynamics.numba_backend, mpc; "
            "print(dict(os.environ) == before)")
    assert _run(code) == ["True"]


def test_numba_backend_configures_it_before_numba_loads_libgomp():
    pytest.importorskip("numba")
    code = ("import os, numpy as np, dynamics; from dynamics.worker_wait import _libgomp_loaded; "
            "be = dynamics.get_backend('numba'); " + _SHOW + "; be.set_threads(1); " + _SHOW + "; "
            "import numba; numba.get_num_threads(); "
            "from dynamics.worker_wait import worker_wait_status as s; print(s().replace(' ', '_'))")
    # constructing the backend changes nothing; its first use sets the spin, libgomp not yet loaded
    assert _run(code) == ["None", "None", "True", "30000", "PASSIVE", "True",
                          "GOMP_SPINCOUNT=30000_(mpc-accel),_OMP_WAIT_POLICY=PASSIVE_(mpc-accel)"]


def test_use_threads_configures_it_first():
    pytest.importorskip("numba")
    code = ("import os; from dynamics.worker_threads import use_threads; "
            "from dynamics.worker_wait import _libgomp_loaded; use_threads(1); "
            "print(os.environ.get('GOMP_SPINCOUNT'), os.environ.get('OMP_WAIT_POLICY'))")
    assert _run(code) == ["30000", "PASSIVE"]


def test_users_environment_wins_in_a_fresh_process():
    pytest.importorskip("numba")
    code = ("import os, dynamics; from dynamics.worker_wait import _libgomp_loaded; "
            "dynamics.get_backend('numba').set_threads(1); " + _SHOW)
    assert _run(code, GOMP_SPINCOUNT="0") == ["0", "PASSIVE", "True"]
    assert _run(code, OMP_WAIT_POLICY="active") == ["None", "active", "True"]
