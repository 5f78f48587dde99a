"""List scheduling of the per-link tasks of the ∇FD datapath onto processing elements, as the
RoboShape code generator (Neuman et al., ISCA 2023 — Yang, Chen & Han 2023 ref. [52]) does for its forward and
backward units.

Tasks (one per clock step of a PE):

* ``ID(i)``: the RNEA part of link i, on the single ID unit;
* ``dID(i, c)``: link i's part of derivative column c (a dof), on one of ``P`` gradient PEs.

Forward pass (Plancher et al. 2021 Algorithm 5 lines 1-4): ``ID(i)`` needs ``ID(parent)``; ``dID(i, c)`` needs
``ID(i)`` and ``dID(parent, c)`` while the parent is in the subtree of c's link (column c is only
nonzero in that subtree). Backward pass (lines 5-7): the direction is reversed; a leaf first needs a
*seed* task (the zero-initialised force of its subtree, RoboShape's "world" task) and column c
visits the subtree of its link (leaves to the link) and then the link's ancestors.

Priority is the number of edges on the longest path to a sink (longest-path-first). Each step, the
ID unit and then each gradient PE take the highest-priority task whose prerequisites finished in an
earlier step, under RoboShape's chain rules: the ID unit continues the chain it is on (descendants
reachable without crossing a join) while one remains; a gradient PE keeps its column until that
column has no task left, and then starts a column no other PE has worked on (a PE that has done
nothing yet may take any ready task). The schedule length is the number of steps.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True)
class ScheduleTree:
    """The tree the accelerator is built for: ``parent[i] < i`` (-1 for a root) and the derivative
    columns (dofs) each node owns (``ncols[i]``: 1 for a revolute/prismatic link, 6 for a floating
    base scheduled as one 6-column link). ``names`` label nodes in reports."""

    parent: tuple
    ncols: tuple
    names: tuple = ()

    def __post_init__(self) -> None:
        for i, p in enumerate(self.parent):
            if not (-1 <= p < i):
                raise ValueError(f"ScheduleTree: parent[{i}] = {p}; nodes must be topologically ordered "
                                 f"(parent < child, -1 for a root)")
        if len(self.ncols) != len(self.parent) or any(c < 1 for c in self.ncols):
            raise ValueError("ScheduleTree: ncols must give >= 1 column for every node")

    @property
    def n(self) -> int:
        return len(self.parent)

    @property
    def ncolumns(self) -> int:
        return int(sum(self.ncols))

    def children(self, i: int) -> list[int]:
        return [k for k, p in enumerate(self.parent) if p == i]

    def roots(self) -> list[int]:
        return [k for k, p in enumerate(self.parent) if p < 0]

    def leaves(self) -> list[int]:
        return [i for i in range(self.n) if not self.children(i)]

    def subtree_preorder(self, j: int) -> list[int]:
        """Nodes of j's subtree in the stack-based preorder RoboShape uses."""
        out, stack = [], [j]
        while stack:
            t = stack.pop()
            out.append(t)
            stack.extend(self.children(t))
        return out

    def ancestors(self, j: int) -> list[int]:
        out, p = [], self.parent[j]
        while p >= 0:
            out.append(p)
            p = self.parent[p]
        return out

    def depth(self, i: int) -> int:
        return len(self.ancestors(i)) + 1

    def columns(self) -> list[tuple[int, int]]:
        """``(node, k)`` for every derivative column, in dof order."""
        return [(i, k) for i in range(self.n) for k in range(self.ncols[i])]

    def column_root(self) -> list[int]:
        """Per column, the root of the tree it belongs to (M⁻¹ is block diagonal by root subtree)."""
        out = []
        for i, _ in self.columns():
            r = i
            while self.parent[r] >= 0:
                r = self.parent[r]
            out.append(r)
        return out


@dataclass(eq=False)
class Task:
    kind: str            # "ID", "dID", "seedID", "seed"
    node: int
    col: int = -1        # derivative column index (dID and seed tasks)
    prereqs: list = field(default_factory=list, repr=False)
    succs: list = field(default_factory=list, repr=False)
    prio: int = 0
    uid: int = -1

    @property
    def on_id_unit(self) -> bool:
        return self.kind in ("ID", "seedID")

    def label(self) -> str:
        return f"{self.kind}({self.node}{',' + str(self.col) if self.col >= 0 else ''})"


@dataclass
class Schedule:
    """A schedule: ``id_unit[s]`` and ``pes[p][s]`` are the task run at step s (None = idle)."""
    tasks: list
    id_unit: list
    pes: list

    @property
    def length(self) -> int:
        return len(self.id_unit)

    def start_step(self) -> dict[int, int]:
        out = {}
        for s, t in enumerate(self.id_unit):
            if t is not None:
                out[t.uid] = s
        for pe in self.pes:
            for s, t in enumerate(pe):
                if t is not None:
                    out[t.uid] = s
        return out


def _link(tasks: list[Task]) -> None:
    for t in tasks:
        for p in t.prereqs:
            p.succs.append(t)


def _order_and_prioritise(tasks: list[Task]) -> list[Task]:
    """Tie-break order of RoboShape's task list (each prerequisite is moved to the end of the list
    when its edges are recorded) and priority = longest path (edges) to a sink."""
    order = list(tasks)
    pos = {id(t): k for k, t in enumerate(order)}
    seq = len(order)
    for t in tasks:
        for p in t.prereqs:
            pos[id(p)] = seq
            seq += 1
    order.sort(key=lambda t: pos[id(t)])
    memo: dict[int, int] = {}
    for t in reversed(_topological(order)):
        memo[id(t)] = 0 if not t.succs else 1 + max(memo[id(s)] for s in t.succs)
    for t in order:
        t.prio = memo[id(t)]
    ranked = sorted(order, key=lambda t: -t.prio)   # stable: ties keep the list order
    for k, t in enumerate(ranked):
        t.uid = k
    return ranked


def _topological(tasks: list[Task]) -> list[Task]:
    indeg = {id(t): len(t.prereqs) for t in tasks}
    ready = [t for t in tasks if indeg[id(t)] == 0]
    out = []
    while ready:
        t = ready.pop()
        out.append(t)
        for s in t.succs:
            indeg[id(s)] -= 1
            if indeg[id(s)] == 0:
                ready.append(s)
    if len(out) != len(tasks):
        raise RuntimeError("task graph has a cycle")
    return out


def forward_tasks(tree: ScheduleTree) -> list[Task]:
    """Task graph of the forward pass (RNEA forward sweep + ∂v, ∂a, ∂f per column)."""
    ID = [Task("ID", i) for i in range(tree.n)]
    for i, p in enumerate(tree.parent):
        if p >= 0:
            ID[i].prereqs.append(ID[p])
    tasks = list(ID)
    for c, (j, _) in enumerate(tree.columns()):
        chain = tree.subtree_preorder(j)
        inside = set(chain)
        made: dict[int, Task] = {}
        for i in chain:
            t = Task("dID", i, c, prereqs=[ID[i]])
            p = tree.parent[i]
            if i != j and p in inside:
                t.prereqs.append(made[p])
            made[i] = t
            tasks.append(t)
    _link(tasks)
    return _order_and_prioritise(tasks)


def backward_tasks(tree: ScheduleTree) -> list[Task]:
    """Task graph of the backward pass (force accumulation + ∂f, ∂c per column)."""
    tasks: list[Task] = []
    ID: dict[int, Task] = {}
    seedID: dict[int, Task] = {}
    for i in range(tree.n):
        if not tree.children(i):
            seedID[i] = Task("seedID", i)
            tasks.append(seedID[i])
        ID[i] = Task("ID", i)
        tasks.append(ID[i])
    for i in range(tree.n):
        kids = tree.children(i)
        ID[i].prereqs.extend([ID[k] for k in kids] if kids else [seedID[i]])
    for c, (j, _) in enumerate(tree.columns()):
        # postorder of j's subtree (reversed stack preorder, seeds after their leaves), then ancestors
        pre: list[tuple[str, int]] = []
        stack = [j]
        while stack:
            t = stack.pop()
            stack.extend(tree.children(t))
            pre.append(("dID", t))
            if not tree.children(t):
                pre.append(("seed", t))
        chain = pre[::-1] + [("dID", a) for a in tree.ancestors(j)]
        members = {i for k, i in chain if k == "dID"}
        made: dict[tuple[str, int], Task] = {}
        for kind, i in chain:
            t = Task(kind, i, c)
            if kind == "dID":
                kids = tree.children(i)
                if kids:
                    for k in kids:
                        t.prereqs.append(ID[k])
                        if k in members:
                            t.prereqs.append(made[("dID", k)])
                else:
                    t.prereqs.extend([seedID[i], made[("seed", i)]])
            made[(kind, i)] = t
            tasks.append(t)
    _link(tasks)
    return _order_and_prioritise(tasks)


def _id_reach(tasks: list[Task]) -> dict[int, set[int]]:
    """For each ID-unit task, the ID-unit tasks reachable through successors without entering a join
    (a task with two or more ID-unit prerequisites)."""
    out = {}
    for t in tasks:
        if not t.on_id_unit:
            continue
        seen: set[int] = set()
        stack = [t]
        while stack:
            x = stack.pop()
            for s in x.succs:
                if s.on_id_unit and s.uid not in seen and sum(p.on_id_unit for p in s.prereqs) <= 1:
                    seen.add(s.uid)
                    stack.append(s)
        out[t.uid] = seen
    return out


def list_schedule(tasks: list[Task], num_pes: int) -> Schedule:
    """Schedule ``tasks`` (from :func:`forward_tasks`/:func:`backward_tasks`) on one ID unit and
    ``num_pes`` gradient PEs (module docstring)."""
    if num_pes < 1:
        raise ValueError(f"list_schedule: need at least one gradient PE, got {num_pes}")
    by_uid = sorted(tasks, key=lambda t: t.uid)
    n = len(by_uid)
    missing = [len(t.prereqs) for t in by_uid]
    done = [False] * n
    pending = [True] * n
    ready: list[int] = sorted(t.uid for t in by_uid if not t.prereqs)
    reach = _id_reach(by_uid)
    col_left: dict[int, int] = {}
    for t in by_uid:
        if not t.on_id_unit:
            col_left[t.col] = col_left.get(t.col, 0) + 1
    id_unit: list = []
    pes: list[list] = [[] for _ in range(num_pes)]
    pe_col: list = [None] * num_pes
    pe_cols_seen: list[set] = [set() for _ in range(num_pes)]
    id_prev = None
    remaining = n
    while remaining:
        picked: list[int] = []
        # the ID unit
        choice = None
        for u in ready:
            t = by_uid[u]
            if not t.on_id_unit:
                continue
            if id_prev is None or u in reach[id_prev] or not any(pending[r] for r in reach[id_prev]):
                choice = u
                break
        id_unit.append(None if choice is None else by_uid[choice])
        if choice is not None:
            picked.append(choice)
            ready.remove(choice)
            pending[choice] = False
        id_prev = choice
        # the gradient PEs
        for p in range(num_pes):
            choice = None
            for u in ready:
                t = by_uid[u]
                if t.on_id_unit:
                    continue
                cp = pe_col[p]
                if cp is None or t.col == cp:
                    choice = u
                    break
                if col_left[cp] == 0 and not any(t.col in pe_cols_seen[q] for q in range(num_pes) if q != p):
                    choice = u
                    break
            pes[p].append(None if choice is None else by_uid[choice])
            if choice is not None:
                t = by_uid[choice]
                picked.append(choice)
                ready.remove(choice)
                pending[choice] = False
                col_left[t.col] -= 1
                pe_col[p] = t.col
                pe_cols_seen[p].add(t.col)
        if not picked:
            raise RuntimeError("list_schedule: no task could be scheduled (dependency cycle?)")
        for u in picked:
            done[u] = True
            remaining -= 1
            for s in by_uid[u].succs:
                missing[s.uid] -= 1
                if missing[s.uid] == 0:
                    bisect.insort(ready, s.uid)
    return Schedule(by_uid, id_unit, pes)


def check_schedule(sched: Schedule) -> list[str]:
    """Every violated dependency (a task starting no later than a prerequisite), as text; empty if
    the schedule respects the tree."""
    start = sched.start_step()
    bad = []
    for t in sched.tasks:
        if t.uid not in start:
            bad.append(f"{t.label()} never scheduled")
            continue
        for p in t.prereqs:
            if start.get(p.uid, 10 ** 9) >= start[t.uid]:
                bad.append(f"{t.label()} at step {start[t.uid]} before its prerequisite {p.label()} "
                           f"(step {start.get(p.uid)})")
    return bad


def block_pattern(tree: ScheduleTree, block_size: int) -> np.ndarray:
    """Block sparsity (nb × nb, bool) of M⁻¹ and of ∂c/∂u tiled in ``block_size`` blocks: two
    columns couple iff they hang from the same root (M is block diagonal by root subtree, and so
    are M⁻¹ and ∂c/∂u)."""
    n = tree.ncolumns
    root = np.array(tree.column_root())
    nz = root[:, None] == root[None, :]
    nb = -(-n // block_size)
    pad = np.zeros((nb * block_size, nb * block_size), dtype=bool)
    pad[:n, :n] = nz
    return pad.reshape(nb, block_size, nb, block_size).any(axis=(1, 3))


def matmul_steps(tree: ScheduleTree, block_size: int, num_pes: int) -> int:
    """Steps of the blocked ``M⁻¹ · ∂c/∂u`` for one matrix: each nonzero tile product
    ``(i, k) · (k, j)`` is ``block_size`` matrix-column products, dealt to ``num_pes`` PEs."""
    P = block_pattern(tree, block_size).astype(np.int64)
    n_products = int((P @ P).sum())
    return -(-n_products * block_size // num_pes)


def matvec_steps(tree: ScheduleTree, block_size: int, num_pes: int) -> int:
    """Steps of a blocked ``M⁻¹ · x`` (one column per nonzero tile)."""
    P = block_pattern(tree, block_size)
    return -(-int(P.sum()) // num_pes)
