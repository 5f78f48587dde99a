"""Tasks for the receding-horizon controller: robot + costs + time-varying references + metrics
and success criteria.

>>> import tasks
>>> tasks.list_tasks()                      # {"iiwa-reach": "..."}
>>> task = tasks.get_task("iiwa-reach")     # or "module:Class", "path/to/file.py:Class"
>>> problem = task.build_problem(task.initial_state(), horizon=32, dt=0.02)
>>> task.update_problem(problem, t=0.5)     # references for a horizon starting at 0.5 s
>>> task.evaluate(times, states, controls).success
"""

from .arm_reach import ArmReach
from .base import Criterion, Disturbance, Evaluation, Event, MetricInfo, RunDefaults, Task, check_evaluation
from .humanoid import AtlasBalance, HumanoidBalance
from .humanoid_walk import HumanoidWalk
from .iiwa_reach import IiwaReach
from .quadruped import HyqStand, QuadrupedStand
from .quadruped_trot import HyqTrot, QuadrupedTrot
from .registry import TaskCodeError, get_task, list_tasks, register_task, resolve_task

__all__ = ["Criterion", "Disturbance", "Evaluation", "Event", "MetricInfo", "RunDefaults", "Task", "check_evaluation",
           "ArmReach", "IiwaReach",
           "QuadrupedStand", "HyqStand", "QuadrupedTrot", "HyqTrot", "HumanoidBalance", "AtlasBalance", "HumanoidWalk",
           "get_task", "list_tasks", "register_task", "resolve_task", "TaskCodeError"]
