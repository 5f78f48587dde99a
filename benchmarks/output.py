"""How a benchmark prints its result: the JSON on stdout (strict JSON: numpy values as Python ones,
non-finite floats as null), also in ``--out FILE``, and a text table on stderr (``--table``).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Callable


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
    """The ``main`` of a benchmark with ``--out`` and ``--table`` options: parse ``argv``,
    ``run(args)``, :func:`emit_result` (the table when ``--table``); returns the result."""
    args = parser.parse_args(argv)
    result = run(args)
    emit_result(result, args.out, format_table(result) if args.table else None)
    return result
