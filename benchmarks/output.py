"""How a benchmark prints its result: the JSON on stdout (strict JSON: numpy values as Python ones,
non-finite floats as null), also in ``--out FILE``, and a text table on stderr (``--table``), which
:class:`TextTable` lays out from declared columns.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Column:
    """One column of a :class:`TextTable`: its ``header``, the format ``spec`` of its cells with
    alignment and width (``"<6"``, ``"4d"``, ``"9.3f"``) and the cell's ``value`` in a row (``None``:
    a blank cell)."""

    header: str
    spec: str
    value: Callable[[dict[str, Any]], Any]

    def _align_width(self) -> tuple[str, str]:
        return re.match(r"([<>^]?)(\d*)", self.spec).groups()

    def header_cell(self) -> str:
        """The header in the cell's width: left-aligned where the spec aligns left, else right."""
        align, width = self._align_width()
        return format(self.header, f"{align or '>'}{width}")

    def cell(self, row: dict[str, Any]) -> str:
        value = self.value(row)
        if value is None:
            return format("", self._align_width()[1])
        return format(value, self.spec)


@dataclass(frozen=True)
class TextTable:
    """The ``--table`` text of a result: a header line, then one line per entry of
    ``result[rows]``, cells separated by one space; an instance is the ``format_table`` argument
    of :func:`run_and_emit`."""

    columns: Sequence[Column]
    rows: str = "results"

    def __call__(self, result: dict[str, Any]) -> str:
        lines = [" ".join(c.header_cell() for c in self.columns)]
        lines += [" ".join(c.cell(r) for c in self.columns) for r in result[self.rows]]
        return "\n".join(lines)


def add_output_arguments(parser: argparse.ArgumentParser, table_help: str = "print a text table on stderr") -> None:
    """Add the ``--out FILE`` and ``--table`` options that :func:`run_and_emit` reads."""
    parser.add_argument("--out", type=Path, default=None, help="also write the JSON to this file")
    parser.add_argument("--table", action="store_true", help=table_help)


def emit_result(result: dict[str, Any], out: Path | str | None, table: str | None = None) -> None:
    """Print ``result`` as JSON on stdout, also write it to ``out`` (if given) and ``table`` on stderr."""
    # imported here, not at the top: sim imports the simulator (MuJoCo)
    from sim.report import jsonable
    text = json.dumps(jsonable(result), indent=1)
    if out is not None:
        out = Path(out)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text + "\n")
    print(text)
    if table is not None:
        print(table, file=sys.stderr)


def run_and_emit(parser: argparse.ArgumentParser, run: Callable[[argparse.Namespace], dict[str, Any]],
                 format_table: Callable[[dict[str, Any]], str], argv: list[str] | None = None) -> dict[str, Any]:
    """The ``main`` of a benchmark with the :func:`add_output_arguments` options: parse ``argv``,
    ``run(args)``, :func:`emit_result` (the table when ``--table``); returns the result."""
    args = parser.parse_args(argv)
    result = run(args)
    emit_result(result, args.out, format_table(result) if args.table else None)
    return result
