"""The project's one jit decorator module and its one on-disk cache-stamp rule
(dynamics/kernels/jit.py, dynamics/kernel_cache.py): every numba CPU kernel of the project is
decorated there, only inside a compiled source, and an edit to a callee in another compiled source
recompiles its cached caller (numba alone would load the stale caller: it stamps a cached function
with its own file only)."""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("numba")

from dynamics import kernel_cache  # noqa: E402
from dynamics.kernels.jit import jit, jit_inline, jit_parallel  # noqa: E402

ROOT = Path(__file__).resolve().parents[3]
PACKAGES = ("dynamics", "solvers", "mpc", "sim", "tasks")


def _project_sources():
    for pkg in PACKAGES:
        yield from (p for p in (ROOT / pkg).rglob("*.py") if "__pycache__" not in p.parts)


def _uses_numba_cpu_decorators(path: Path) -> bool:
    """Whether the module imports ``njit``/``jit`` from numba or refers to ``numba.njit``/``numba.jit``."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module == "numba" and \
                any(a.name in ("njit", "jit") for a in node.names):
            return True
        if isinstance(node, ast.Attribute) and node.attr in ("njit", "jit") and \
                isinstance(node.value, ast.Name) and node.value.id == "numba":
            return True
    return False


def test_numba_cpu_decorators_are_defined_in_one_module():
    """No project module but dynamics/kernels/jit.py uses numba's CPU decorators itself."""
    users = [str(p.relative_to(ROOT)) for p in _project_sources() if _uses_numba_cpu_decorators(p)]
    assert users == ["dynamics/kernels/jit.py"]


def _uses_project_decorators(path: Path) -> bool:
    """Whether the module imports ``jit``, ``jit_inline`` or ``jit_parallel`` from dynamics/kernels/jit.py."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[-1] == "jit" and \
                any(a.name in ("jit", "jit_inline", "jit_parallel") for a in node.names):
            return True
    return False


def test_every_module_using_the_decorators_is_a_compiled_source():
    users = {p.resolve() for p in _project_sources() if _uses_project_decorators(p)}
    assert len(users) >= 15                   # the kernel library, the contact kernels, the solvers' kernels
    missing = sorted(str(p.relative_to(ROOT)) for p in users - set(kernel_cache.compiled_source_files()))
    assert missing == []


@pytest.mark.parametrize("decorator", [jit, jit_inline, jit_parallel])
def test_a_function_outside_the_compiled_sources_is_refused(decorator):
    def outside(x):
        return x + 1.0
    with pytest.raises(ValueError, match="not in a compiled source"):
        decorator(outside)


_CALLEE = '''from .jit import jit


@jit
def probe_value():
    return {value}
'''

_CALLER = '''from ._probe_callee import probe_value
from .jit import jit


@jit
def probe():
    return probe_value() + 0.5
'''

_RUN = ("from dynamics.kernels._probe_caller import probe\n"
        "print(probe(), 'hit' if probe.stats.cache_hits else 'miss')\n")


def test_an_edit_to_a_callee_in_another_file_recompiles_the_cached_caller(tmp_path):
    """A copy of the dynamics package with a caller and a callee kernel in two files of the kernel
    library, run in fresh processes: cached after the first run, recompiled (with the new callee)
    after the callee's file changes although the caller's file did not."""
    shutil.copytree(ROOT / "dynamics", tmp_path / "dynamics", ignore=shutil.ignore_patterns("__pycache__"))
    kernels = tmp_path / "dynamics" / "kernels"
    (kernels / "_probe_callee.py").write_text(_CALLEE.format(value="1.0"))
    (kernels / "_probe_caller.py").write_text(_CALLER)
    env = dict(os.environ, PYTHONPATH=str(tmp_path))
    env.pop("NUMBA_CACHE_DIR", None)      # the cache next to the copied sources

    def run() -> list[str]:
        out = subprocess.run([sys.executable, "-c", _RUN], env=env, cwd=tmp_path, capture_output=True, text=True,
                             timeout=300)
        assert out.returncode == 0, out.stderr
        return out.stdout.split()

    assert run() == ["1.5", "miss"]
    assert run() == ["1.5", "hit"]
    caller_stat = (kernels / "_probe_caller.py").stat()
    (kernels / "_probe_callee.py").write_text(_CALLEE.format(value="2.0"))
    assert (kernels / "_probe_caller.py").stat().st_mtime_ns == caller_stat.st_mtime_ns
    assert run() == ["2.5", "miss"]
    assert run() == ["2.5", "hit"]
