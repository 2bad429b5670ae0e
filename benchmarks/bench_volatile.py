"""Cost of masking volatile counters in one outcome, by result size.

For typical tool results (a short bash error, a file view, pytest output, a
log, and the real recorded results of ``../shared/realdata`` when present,
bucketed by size) prints nanoseconds per result for ``mask_volatile`` next to
``sha256`` of the same text (what hashing the outcome costs anyway). Best of
``--rounds``; this machine is shared, so ``--callgrind`` also prints
instruction counts, which do not depend on the load.

Run: ``python benchmarks/bench_volatile.py [--rounds 7] [--callgrind]``.
"""

from __future__ import annotations

import argparse
import hashlib
import sys
import time
from collections.abc import Callable

from _callgrind import collected

from loopwarden.profiles.volatile import MIN_LENGTH, mask_volatile

SHELL_ERROR = "/bin/bash: line 18516: cd: fastjson/: No such file or directory"
FILE_VIEW = (
    "[File: /repo/src/Main.java (443 lines total)]\n(12 more lines above)\n"
    + "".join(f'{n}:    int value{n} = compute({n}, "x"); // note {n}\n' for n in range(13, 113))
    + "(331 more lines below)"
)
PYTEST = "".join(f"tests/test_m{n}.py::test_case_{n} PASSED [{n}%]\n" for n in range(100)) + (
    "==================== 100 passed in 3.21s ===================="
)
LOG = "".join(
    f"2024-08-21T04:{n % 60:02d}:38Z INFO worker pid=4242 handled request {n} in 12ms\n"
    for n in range(200)
)


def samples() -> dict[str, list[str]]:
    out = {
        f"short ({MIN_LENGTH - 1} chars, not scanned)": ["x" * (MIN_LENGTH - 1)],
        f"bash error ({len(SHELL_ERROR)} chars)": [SHELL_ERROR],
        f"file view ({len(FILE_VIEW)} chars)": [FILE_VIEW],
        f"pytest output ({len(PYTEST)} chars)": [PYTEST],
        f"log with timestamps ({len(LOG)} chars)": [LOG],
    }
    try:
        from _realdata import load_runs

        texts = [c.text() for r in load_runs() for c in r.calls if c.result is not None]
    except SystemExit:
        return out
    for low, high in ((0, 256), (256, 2048), (2048, 8192), (8192, 1 << 20)):
        bucket = [t for t in texts if low <= len(t) < high]
        if bucket:
            mean = sum(map(len, bucket)) // len(bucket)
            out[f"real results {low}-{high} B ({len(bucket)}, mean {mean})"] = bucket
    return out


def timed(fn: Callable[[str], object], texts: list[str], rounds: int) -> float:
    """Best nanoseconds per text over ``rounds``."""
    repeat = max(1, 20000 // len(texts))
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter_ns()
        for _ in range(repeat):
            for text in texts:
                fn(text)
        best = min(best, (time.perf_counter_ns() - start) / (repeat * len(texts)))
    return best


def sha(text: str) -> object:
    return hashlib.sha256(text.encode()).digest()


def callgrind(name: str, texts: list[str]) -> None:
    script = (
        "import sys, pickle\nsys.path.insert(0, %r)\nfrom loopwarden.profiles.volatile import "
        "mask_volatile\ntexts = pickle.loads(sys.stdin.buffer.read())\n"
        "for t in texts:\n    %s\n"
    )
    import pickle

    data = pickle.dumps(texts)
    counts = [
        collected(script % (sys.path[0], body), data)[0] for body in ("pass", "mask_volatile(t)")
    ]
    chars = sum(map(len, texts))
    print(
        f"  {name:48s} {(counts[1] - counts[0]) / len(texts):10.0f} instr/result "
        f"{(counts[1] - counts[0]) / max(chars, 1):6.1f} instr/char"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--callgrind", action="store_true")
    args = parser.parse_args()
    print(f"{'result':50s} {'mask ns':>10s} {'sha256 ns':>10s} {'ratio':>6s}")
    cases = samples()
    for name, texts in cases.items():
        masked = timed(mask_volatile, texts, args.rounds)
        hashed = timed(sha, texts, args.rounds)
        print(f"{name:50s} {masked:10.0f} {hashed:10.0f} {masked / hashed:6.2f}")
    if args.callgrind:
        print("\ncallgrind:")
        for name, texts in cases.items():
            # Enough results that interpreter start-up noise does not show per result.
            callgrind(name, (texts * (400 // len(texts) + 1))[:400])


if __name__ == "__main__":
    main()
