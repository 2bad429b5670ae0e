"""Instruction counts of a Python snippet under callgrind (stable on a busy machine)."""

from __future__ import annotations

import subprocess
import sys


def collected(script: str, stdin: bytes | None = None) -> tuple[int, str]:
    """Instructions callgrind counted for ``python -c script``, and what it printed."""
    proc = subprocess.run(
        [
            "valgrind",
            "--tool=callgrind",
            "--callgrind-out-file=/dev/null",
            sys.executable,
            "-c",
            script,
        ],
        input=stdin,
        capture_output=True,
        check=False,
    )
    err = proc.stderr.decode(errors="replace")
    if "Collected : " not in err:
        raise SystemExit(f"callgrind failed (is valgrind installed?):\n{err[-2000:]}")
    return int(err.split("Collected : ")[1].split()[0]), proc.stdout.decode()
