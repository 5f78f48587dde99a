"""Registry of tasks by name, plus loading user tasks from ``"module:Class"`` or
``"path/to/file.py:Class"`` specs."""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path

from .base import Task


class TaskCodeError(RuntimeError):
    """Importing a user's task module raised; the original exception is chained (``__cause__``),
    so its traceback points into the user's code."""


_REGISTRY: dict[str, tuple[type, str]] = {}


def register_task(name: str, description: str = ""):
    """Class decorator: make ``get_task(name)`` build this task."""
    def deco(cls):
        if not (isinstance(cls, type) and issubclass(cls, Task)):
            raise TypeError(f"register_task('{name}'): {cls!r} is not a subclass of tasks.Task")
        doc_lines = (cls.__doc__ or "").strip().splitlines()
        _REGISTRY[name] = (cls, description or (doc_lines[0] if doc_lines else ""))
        return cls
    return deco


def list_tasks() -> dict[str, str]:
    """Registered task names -> one-line descriptions."""
    return {name: desc for name, (_, desc) in _REGISTRY.items()}


def _load_class(spec: str) -> type:
    where, _, cls_name = spec.rpartition(":")
    if not where or not cls_name:
        raise ValueError(f"task spec '{spec}' is neither a registered task ({', '.join(_REGISTRY) or 'none'}) nor "
                         f"of the form 'module:Class' or 'path/to/file.py:Class'")
    if where.endswith(".py") or "/" in where or "\\" in where:
        path = Path(where).expanduser().resolve()
        if not path.is_file():
            raise FileNotFoundError(f"task spec '{spec}': no such file '{path}'")
        mod_name = f"_mpc_accel_user_task_{abs(hash(str(path)))}"
        mspec = importlib.util.spec_from_file_location(mod_name, path)
        module = importlib.util.module_from_spec(mspec)
        sys.modules[mod_name] = module   # dataclasses need their module registered
        try:
            mspec.loader.exec_module(module)
        except Exception as e:
            sys.modules.pop(mod_name, None)
            raise TaskCodeError(f"task spec '{spec}': running '{path}' raised {type(e).__name__}: {e}") from e
    else:
        try:
            module = importlib.import_module(where)
        except ModuleNotFoundError as e:
            if e.name is not None and (where == e.name or where.startswith(e.name + ".")):
                raise ModuleNotFoundError(f"task spec '{spec}': no module named '{e.name}'", name=e.name) from None
            raise TaskCodeError(f"task spec '{spec}': importing '{where}' raised {type(e).__name__}: {e}") from e
        except Exception as e:
            raise TaskCodeError(f"task spec '{spec}': importing '{where}' raised {type(e).__name__}: {e}") from e
    cls = getattr(module, cls_name, None)
    if cls is None:
        raise AttributeError(f"task spec '{spec}': '{where}' has no attribute '{cls_name}'")
    if not (isinstance(cls, type) and issubclass(cls, Task)):
        raise TypeError(f"task spec '{spec}': {cls_name} is not a subclass of tasks.Task")
    return cls


def resolve_task(name_or_spec) -> type:
    """The Task class of a registered name, ``"module:Class"`` or ``"path/to/file.py:Class"``.
    Raises KeyError/ValueError/FileNotFoundError/ModuleNotFoundError/AttributeError/TypeError
    for a spec that names nothing usable, :class:`TaskCodeError` when the user's module raised
    while being imported."""
    if isinstance(name_or_spec, type) and issubclass(name_or_spec, Task):
        return name_or_spec
    if not isinstance(name_or_spec, str):
        raise TypeError(f"resolve_task: expected a task name or spec string, got {type(name_or_spec).__name__}")
    if name_or_spec in _REGISTRY:
        return _REGISTRY[name_or_spec][0]
    if ":" not in name_or_spec:
        raise KeyError(f"unknown task '{name_or_spec}'; registered tasks: {', '.join(_REGISTRY) or '(none)'}; "
                       f"user tasks are given as 'module:Class' or 'path/to/file.py:Class'")
    return _load_class(name_or_spec)


def get_task(name_or_spec, **kwargs) -> Task:
    """Build a task: a registered name (``"iiwa-reach"``), ``"module:Class"``,
    ``"path/to/file.py:Class"``, a Task subclass, or a Task instance (returned as is).
    ``kwargs`` go to the task's constructor."""
    if isinstance(name_or_spec, Task):
        if kwargs:
            raise ValueError("keyword arguments cannot be applied to an already built task instance")
        return name_or_spec
    return resolve_task(name_or_spec)(**kwargs)
