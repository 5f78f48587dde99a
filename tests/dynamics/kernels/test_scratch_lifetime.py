"""The lifetime rule of borrowed scratch views (dynamics.kernels.scratch), checked in the source of
every compiled kernel: a view carries no reference to its buffer, so the buffer must outlive it.

numba releases a local array right after its last use. A buffer allocated and carved in the same
function would be freed after the carving and its views would read freed memory: silently wrong
numbers, not a crash. The rule that prevents it is checked on the source, not on the numbers:

A. every call of a view function (``carve``, ``view1``-``view3``, ``*_views``) takes as its
   buffer (first argument) a parameter of the function making the call;
B. a function that calls one is compiled on its own (``@jit``), not inlined into its callers
   (``@jit_inline`` would turn the parameter into a caller's local), unless it is itself a view
   function (its callers are then held to A);
C. only view functions return views.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from dynamics.kernel_cache import PROJECT_ROOT, compiled_source_files

_FIXED_VIEWS = {"carve", "view1", "view2", "view3"}


def is_view_function(name: str) -> bool:
    return name in _FIXED_VIEWS or name.endswith("_views")


def _callee(call: ast.Call) -> str | None:
    f = call.func
    if isinstance(f, ast.Name):
        return f.id
    if isinstance(f, ast.Attribute):
        return f.attr
    return None


def _decorators(fn: ast.FunctionDef) -> set[str]:
    names = set()
    for d in fn.decorator_list:
        d = d.func if isinstance(d, ast.Call) else d
        if isinstance(d, ast.Name):
            names.add(d.id)
        elif isinstance(d, ast.Attribute):
            names.add(d.attr)
    return names


def _bound_names(target: ast.AST) -> list[str]:
    if isinstance(target, ast.Name):
        return [target.id]
    if isinstance(target, (ast.Tuple, ast.List)):
        return [n for t in target.elts for n in _bound_names(t)]
    if isinstance(target, ast.Starred):
        return _bound_names(target.value)
    return []


def lifetime_violations(source: str, filename: str = "<source>") -> list[str]:
    """The breaches of rules A-C in ``source``, one line each (empty: none)."""
    out = []
    for fn in (n for n in ast.walk(ast.parse(source, filename)) if isinstance(n, ast.FunctionDef)):
        params = {a.arg for a in fn.args.posonlyargs + fn.args.args + fn.args.kwonlyargs}
        where = f"{filename}:{fn.lineno} {fn.name}"
        own_view = is_view_function(fn.name)
        carves = False
        view_names: set[str] = set()
        for node in ast.walk(fn):
            if isinstance(node, ast.Call) and is_view_function(_callee(node) or ""):
                carves = True
                first = node.args[0] if node.args else None
                if not (isinstance(first, ast.Name) and first.id in params):
                    got = ast.unparse(first) if first is not None else "nothing"
                    out.append(f"{where}: {_callee(node)}() carves from {got}, not from a parameter (rule A)")
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) \
                    and is_view_function(_callee(node.value) or ""):
                for t in node.targets:
                    view_names.update(_bound_names(t))
        if carves and "jit_inline" in _decorators(fn) and not own_view:
            out.append(f"{where}: carves scratch views but is @jit_inline (rule B)")
        if own_view:
            continue
        for node in ast.walk(fn):
            if isinstance(node, ast.Return) and node.value is not None and \
                    any(_is_view(e, view_names) for e in _returned(node.value)):
                out.append(f"{where}: returns a scratch view (rule C)")
    return out


def _returned(value: ast.AST) -> list[ast.AST]:
    """The values a return statement hands back: the elements of (nested) tuples."""
    if isinstance(value, ast.Tuple):
        return [e for v in value.elts for e in _returned(v)]
    return [value]


def _is_view(e: ast.AST, view_names: set[str]) -> bool:
    return (isinstance(e, ast.Name) and e.id in view_names) or \
        (isinstance(e, ast.Call) and is_view_function(_callee(e) or ""))


@pytest.mark.parametrize("path", compiled_source_files(), ids=lambda p: str(p.relative_to(PROJECT_ROOT)))
def test_compiled_sources_keep_scratch_buffers_alive(path: Path):
    assert lifetime_violations(path.read_text(), str(path.relative_to(PROJECT_ROOT))) == []


def test_the_rule_is_checked_somewhere():
    sources = "".join(p.read_text() for p in compiled_source_files())
    assert "view2(buf" in sources and "placement_views(buf" in sources


_GOOD = '''
@jit
def kernel(li, v):
    _kernel(buffer(T, 3, 4), li, v)

@jit
def _kernel(buf, li, v):
    R = view3(buf, _AB.R, 3, 4)
    views = placement_views(buf, 3, 4)
    return R[0, 0, 0] + views[0][0, 0, 0]

@jit
def placement_views(buf, L, nv):
    return view3(buf, _AB.R, L, nv), view2(buf, _AB.p, L, nv)
'''


@pytest.mark.parametrize("bad, rule", ids=["local-buffer", "temporary-buffer", "inlined", "returned", "returned-call"], argvalues=[
    # the buffer is a local: freed after the carving, before the loop reads R
    ('''
@jit
def kernel(li, v):
    buf = buffer(T, 3, 4)
    R = view3(buf, _AB.R, 3, 4)
    for i in range(3):
        R[i, 0, 0] = 1.0
''', "rule A"),
    ('''
@jit
def kernel(li, v):
    return run(placement_views(buffer(T, 3, 4), 3, 4))
''', "rule A"),
    ('''
@jit_inline
def _kernel(buf, li, v):
    R = view3(buf, _AB.R, 3, 4)
''', "rule B"),
    ('''
@jit
def workspace(buf, L, nv):
    R = view3(buf, _AB.R, L, nv)
    return R, np.empty(3)
''', "rule C"),
    ('''
@jit
def workspace(buf, L, nv):
    return (view3(buf, _AB.R, L, nv),)
''', "rule C"),
])
def test_the_checker_finds_each_breach(bad: str, rule: str):
    assert lifetime_violations(_GOOD) == []
    found = lifetime_violations(bad)
    assert found and all(rule in f for f in found), found
