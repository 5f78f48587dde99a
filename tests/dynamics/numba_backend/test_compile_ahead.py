"""Compiling ahead in a second process (dynamics/numba_backend/compile_ahead.py): the cold-cache
probe, the child's start/wait/failure path, and that a warm cache starts no child. (The full
first-run compile it speeds up takes a minute; it is measured, not run here: README, docs/backends.md.)"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("numba")

from dynamics import get_backend, load_model  # noqa: E402
from dynamics.numba_backend import compile_ahead as ca  # noqa: E402

ROOT = Path(__file__).resolve().parents[3]


def test_probe_says_cold_on_an_empty_cache_and_warm_after(tmp_path):
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path), PYTHONPATH=str(ROOT))
    code = "from dynamics.numba_backend import compile_ahead as ca; print(ca.cache_is_cold())"
    first = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    second = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert first.stdout.strip() == "True", first.stderr
    assert second.stdout.strip() == "False", second.stderr
    assert any(tmp_path.rglob("*.nbi"))          # the probe's cache index was written there


def test_child_failure_is_reported_not_raised():
    job = ca.start(["no_such_kernel:serial"], [("no_such_kernel", 2)])
    assert job is not None and job.calls == [("no_such_kernel", 2)]
    assert job.wait(timeout=120) is False


def test_child_imports_the_parents_package_not_one_in_the_working_directory(tmp_path, monkeypatch):
    # a first run from a source checkout's root (the README's commands) has a `dynamics` folder in
    # the working directory; the child must compile into the cache of the package the parent runs
    shadow = tmp_path / "dynamics"
    shadow.mkdir()
    (shadow / "__init__.py").write_text("raise ImportError('the copy in the working directory')\n")
    monkeypatch.chdir(tmp_path)
    job = ca.start([], [])                       # no calls: the child imports the package and exits
    assert job is not None and job.wait(timeout=120) is True


def test_warm_cache_starts_no_child():
    be = get_backend("numba")
    m = load_model("iiwa")
    ca.cache_is_cold()          # compiled (or loaded) in this process: the cache is warm now
    assert be.compile_ahead(m, [("aba_derivatives", 32), ("aba_second_derivatives", 32)]) is None
    assert be._variant("aba_derivatives", m, 1) == "serial"


def test_cold_cache_sends_every_derivative_kernel_to_the_child(monkeypatch):
    """The child takes the first- and second-order batched kernels (second order first), each in the
    variant the backend will run it in; the parent keeps the rest."""
    be = get_backend("numba")
    m = load_model("iiwa")
    started = []
    monkeypatch.setattr(ca, "cache_is_cold", lambda: True)
    monkeypatch.setattr(ca, "start", lambda specs, calls: started.append((specs, calls)) or "job")
    calls = [("aba_derivatives", 32), ("rnea", 32), ("aba_second_derivatives", 32), ("aba_derivatives", 32)]
    assert be.compile_ahead(m, calls) == "job"
    specs, taken = started[0]
    assert taken == [("aba_second_derivatives", 32), ("aba_derivatives", 32)]
    assert specs == [f"aba_second_derivatives:{be._variant('second_order', m, 32)}",
                     f"aba_derivatives:{be._variant('aba_derivatives', m, 32)}"]
    assert be.compile_ahead(m, [("aba_derivatives", 1)]) == "job"
    assert started[1] == (["aba_derivatives:serial"], [("aba_derivatives", 1)])
