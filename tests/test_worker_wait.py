"""dynamics.worker_wait: on import of dynamics, libgomp's workers get a short bounded spin
(OMP_WAIT_POLICY=PASSIVE, GOMP_SPINCOUNT=30000) where the user chose nothing, before libgomp
loads; a user's setting of either variable is never overridden."""

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
    assert "libgomp default" in ww.worker_wait_status()


def test_importing_dynamics_configures_it_before_numba_loads_libgomp():
    env = {k: v for k, v in os.environ.items() if k not in ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY")}
    code = ("import os, dynamics, dynamics.numba_backend; from dynamics.worker_wait import _libgomp_loaded; "
            "print(os.environ.get('GOMP_SPINCOUNT'), os.environ.get('OMP_WAIT_POLICY'), "
            "_libgomp_loaded() in (False, None))")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    assert out.split() == ["30000", "PASSIVE", "True"]
