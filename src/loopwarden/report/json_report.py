"""``--format json``: one JSON document, streamed run by run.

The document is written as the runs finish (one run object per line inside
the ``runs`` array), so memory does not grow with the number of runs. The
schema is documented in ``docs/cli.md`` and named by the ``schema`` field.
"""

from __future__ import annotations

from typing import IO

import orjson

from ..traces.replay import RunReport
from . import SCHEMA, ReplayMeta, Totals

__all__ = ["JsonWriter"]


class JsonWriter:
    """Writes the replay report as JSON to a binary stream."""

    def __init__(self, out: IO[bytes]) -> None:
        self.out = out
        self._first = True

    def start(self, meta: ReplayMeta) -> None:
        head = orjson.dumps(
            {"schema": SCHEMA, "loopwarden_version": meta.version, "config": meta.to_dict()}
        )
        self.out.write(head[:-1] + b',\n"runs": [\n')

    def run(self, report: RunReport) -> None:
        data = orjson.dumps(report.to_dict())
        if self._first:
            self._first = False
            self.out.write(data)
        else:
            self.out.write(b",\n" + data)

    def finish(self, totals: Totals) -> None:
        tail = {
            "inputs": [i.to_dict() for i in totals.inputs],
            "problems": [{"where": w, "reason": r} for w, r in totals.problem_list],
            "problems_omitted": totals.problems - len(totals.problem_list),
            "totals": totals.to_dict(),
        }
        body = orjson.dumps(tail)
        self.out.write(b"\n],\n" + body[1:] + b"\n")
        self.out.flush()
