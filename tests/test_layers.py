"""The package layers, low to high, and that no module imports upward or another package's private
names — at any level: module top, inside a function, under ``TYPE_CHECKING``.

A layer may import from itself and from the layers below it; what two layers share lives below
both. The order follows what the code uses: the solvers build on the dynamics backends, the tasks
build shooting problems from the solvers' action models and costs, the simulator and its run
reports consume tasks (their metrics and evaluation), the MPC controller drives solvers on tasks,
the study sweeps MPC runs, and the command line (with the study's per-run worker, which is
``mpc-accel run`` in a subprocess) is on top. Modules are parsed with :mod:`ast`, never imported."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: module prefix -> layer (higher may import lower); a module takes the entry of its longest prefix
LAYERS: dict[str, int] = {
    "dynamics": 0,
    "solvers": 1,
    "tasks": 2,
    "sim": 3,
    "mpc": 4,                   # controller, plan, argument types
    "mpc.study": 5,
    "mpc.cli": 6,
    "mpc.__main__": 6,
    "mpc.study.worker": 6,      # one study run: `mpc-accel run` in a subprocess
}
PACKAGES = ("dynamics", "solvers", "tasks", "sim", "mpc")


def layer_of(module: str) -> int | None:
    """The layer of a dotted module name (None: not one of the project's packages)."""
    parts = module.split(".")
    for n in range(len(parts), 0, -1):
        key = ".".join(parts[:n])
        if key in LAYERS:
            return LAYERS[key]
    return None


def module_name(path: Path, root: Path = ROOT) -> str:
    rel = path.relative_to(root).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


def _is_module(name: str, root: Path) -> bool:
    p = root.joinpath(*name.split("."))
    return p.with_suffix(".py").is_file() or (p / "__init__.py").is_file()


def imports(source: str, module: str, is_package: bool, root: Path = ROOT) -> list[tuple[int, str, list[str]]]:
    """Every import in ``source`` (module ``module``): (line, imported module, imported names);
    relative imports resolved, ``from pkg import submodule`` counted as importing the submodule."""
    out = []
    package = module if is_package else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            out.extend((node.lineno, a.name, []) for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            names = [a.name for a in node.names]
            subs = [n for n in names if _is_module(f"{target}.{n}", root)]
            out.extend((node.lineno, f"{target}.{n}", []) for n in subs)
            rest = [n for n in names if n not in subs]
            if rest or not subs:
                out.append((node.lineno, target, rest))
    return out


def violations(path: Path, root: Path = ROOT) -> list[str]:
    """Upward imports and private names taken from another package, in the file at ``path``."""
    module = module_name(path, root)
    own = layer_of(module)
    found = []
    for line, target, names in imports(path.read_text(), module, path.name == "__init__.py", root):
        layer = layer_of(target)
        if layer is None:
            continue
        where = f"{path.relative_to(root)}:{line}"
        if layer > own:
            found.append(f"{where}: {module} (layer {own}) imports {target} (layer {layer}), a higher layer")
        if target.split(".")[0] != module.split(".")[0]:
            private = [n for n in names if n.startswith("_") and not n.startswith("__")]
            private += [p for p in target.split(".") if p.startswith("_") and not p.startswith("__")]
            if private:
                found.append(f"{where}: {module} imports private {', '.join(private)} of {target}")
    return found


def project_modules() -> list[Path]:
    return sorted(p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py"))


def test_every_package_has_a_layer():
    # tests/ is a package too (its helpers are imported as tests.helpers), but it ships with nothing
    tops = {p.name for p in ROOT.iterdir() if (p / "__init__.py").is_file()} - {"tests"}
    assert tops <= set(PACKAGES), f"packages without a layer in LAYERS: {sorted(tops - set(PACKAGES))}"
    assert all(layer_of(module_name(p)) is not None for p in project_modules())


def test_no_module_imports_a_higher_layer_or_another_packages_private_names():
    found = [v for p in project_modules() for v in violations(p)]
    assert not found, "\n".join(found)


@pytest.mark.parametrize("source, expected", [
    ("def f():\n    from mpc.controller import MPC\n", "a higher layer"),         # function level
    ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import sim\n", "a higher layer"),
    ("from ..sim import runner\n", "a higher layer"),                             # relative, submodule
    ("from solvers.ilqr import _StageTimer\n", "private _StageTimer"),
    ("import numpy\nfrom dynamics import load_model\nfrom . import base\n", None),
])
def test_checker_finds_upward_and_private_imports(tmp_path, source, expected):
    """The checker on a module placed in the tasks layer: what it must catch, and what it must not."""
    for pkg in PACKAGES:
        (tmp_path / pkg).mkdir()
        (tmp_path / pkg / "__init__.py").write_text("")
    (tmp_path / "sim" / "runner.py").write_text("")
    (tmp_path / "tasks" / "base.py").write_text("")
    path = tmp_path / "tasks" / "probe.py"
    path.write_text(source)
    found = violations(path, tmp_path)
    if expected is None:
        assert found == []
    else:
        assert len(found) == 1 and expected in found[0], found
