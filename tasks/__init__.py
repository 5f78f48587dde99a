"""Tasks for the receding-horizon controller: robot + costs + time-varying references + metrics.

>>> import tasks
>>> tasks.list_tasks()                      # {"iiwa-reach": "..."}
>>> task = tasks.get_task("iiwa-reach")     # or "module:Class", "path/to/file.py:Class"
>>> problem = task.build_problem(task.initial_state(), horizon=32, dt=0.02)
>>> task.update_problem(problem, t=0.5)     # references for a horizon starting at 0.5 s
"""

from .base import Task
from .iiwa_reach import IiwaReach
from .registry import get_task, list_tasks, register_task

__all__ = ["Task", "IiwaReach", "get_task", "list_tasks", "register_task"]
