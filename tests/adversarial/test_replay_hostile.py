"""``loopwarden replay`` on hostile inputs: bounded memory, no hangs, no escapes, no data loss.

Issue 11, defects 4, 5, 11, 12 and 21. Replay runs as the real console script
under a timeout and an address-space cap; its peak RSS comes from the kernel.
"""

from __future__ import annotations

import gzip
import os
import re
from pathlib import Path

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.adversarial import _traces as traces
from tests.adversarial._procs import LOOPWARDEN, MiB, Ran, run_bounded, run_unless_blocked

pytestmark = pytest.mark.timeout(180)

LOOP = [("poll", {"job": 7}, {"status": "pending"})] * 6
SMALL_SETS = (
    "--set",
    "warningThreshold=2",
    "--set",
    "criticalThreshold=3",
    "--set",
    "globalCircuitBreakerThreshold=4",
)
# Room above a small replay's peak RSS: a bound on line length (or on held spans)
# of up to ~100 MiB passes; reading a 256 MiB line, or /dev/zero, does not.
RSS_SLACK = 128 * MiB


def replay(*args: str, timeout: float = 120.0, max_as: int | None = 3072 * MiB) -> Ran:
    ran = run_bounded([LOOPWARDEN, "replay", *args], timeout=timeout, max_as=max_as, rss=True)
    assert not ran.timed_out, f"replay did not finish within {timeout} s"
    return ran


@pytest.fixture(name="baseline_rss", scope="module")
def fixture_baseline_rss(tmp_path_factory: pytest.TempPathFactory) -> int:
    """Peak RSS of replaying one small trace (interpreter, imports, one run)."""
    folder = tmp_path_factory.mktemp("baseline")
    ran = replay(str(traces.write(folder / "small.jsonl", "loopwarden", LOOP)), "--format", "json")
    assert ran.code == 0
    return ran.peak


def assert_clean_stderr(ran: Ran) -> None:
    assert "Traceback" not in ran.err, ran.err
    assert "internal error" not in ran.err, ran.err


# -- defect 4: single-line inputs, /dev/zero, FIFOs ------------------------------------
@pytest.fixture(name="gz_bomb", scope="module")
def fixture_gz_bomb(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A ~250 KiB ``.jsonl.gz`` holding one valid JSON line of 256 MiB (written in chunks)."""
    path = tmp_path_factory.mktemp("bomb") / "huge.jsonl.gz"
    chunk = b"a" * MiB
    with gzip.open(path, "wb", compresslevel=9) as gz:
        gz.write(b'{"type": "call", "run_id": "r1", "tool": "x", "pad": "')
        for _ in range(256):
            gz.write(chunk)
        gz.write(b'"}\n')
    assert path.stat().st_size < MiB
    return path


@pytest.mark.slow
def test_gzip_with_one_huge_line_stays_bounded(gz_bomb: Path, baseline_rss: int) -> None:
    """One 256 MiB line inside a small ``.gz`` is reported and skipped in bounded memory."""
    ran = replay(str(gz_bomb), "--format", "json")
    assert_clean_stderr(ran)
    assert ran.code in (0, 2)
    assert gz_bomb.name in ran.err, "the skipped line is not reported"
    grown = ran.peak - baseline_rss
    assert grown < RSS_SLACK, f"peak RSS grew by {grown / MiB:.0f} MiB"


def test_dev_zero_symlink_in_a_folder_is_skipped(tmp_path: Path, baseline_rss: int) -> None:
    """A ``*.jsonl`` symlink to a character device is skipped with a message; the rest is
    replayed, in bounded memory and time."""
    traces.write(tmp_path / "good.jsonl", "loopwarden", LOOP)
    (tmp_path / "zero.jsonl").symlink_to("/dev/zero")
    ran = replay(str(tmp_path), "--format", "json", timeout=60, max_as=1536 * MiB)
    assert_clean_stderr(ran)
    assert ran.code == 0
    assert "zero.jsonl" in ran.err
    report = orjson.loads(ran.stdout)
    assert [run["calls"] for run in report["runs"]] == [6]
    assert ran.peak - baseline_rss < RSS_SLACK


def test_fifo_in_a_folder_is_skipped(tmp_path: Path) -> None:
    """A FIFO named ``*.jsonl`` in a folder is skipped, never opened for reading."""
    traces.write(tmp_path / "good.jsonl", "loopwarden", LOOP)
    os.mkfifo(tmp_path / "pipe.jsonl")
    ran = run_unless_blocked([LOOPWARDEN, "replay", str(tmp_path), "--format", "json"])
    assert ran is not None, "replay waited for a writer on the FIFO"
    assert ran.code == 0
    assert [run["calls"] for run in orjson.loads(ran.stdout)["runs"]] == [6]


# -- defect 5: terminal escapes in the text report ----------------------------------------
CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
HOSTILE_TOOL = "\x1b]0;owned\x07poll\x1b[2J"
HOSTILE_RUN = "run\x1b[1A\x1b[2K\x1b[32mOK\x1b[0m"
HOSTILE_TITLE = "deploy\x1b]0;pwned\x07 \x9b2J now"


@pytest.mark.parametrize("verbose", [False, True], ids=["plain", "verbose"])
def test_text_report_escapes_control_characters(tmp_path: Path, verbose: bool) -> None:
    """Tool names, run ids and titles from a trace cannot drive the terminal."""
    calls = [(HOSTILE_TOOL, {"job": 7}, {"status": "pending"})] * 6
    record = tmp_path / "record.jsonl"
    record.write_bytes(traces.loopwarden_record(calls, run=HOSTILE_RUN))
    transcript = tmp_path / "claude.jsonl"
    transcript.write_bytes(traces.claude_code(calls, prompt=HOSTILE_TITLE))
    extra = ("-v",) if verbose else ()
    ran = replay(str(record), str(transcript), *SMALL_SETS, "--no-color", *extra)
    assert ran.code == 0
    text = ran.stdout.decode("utf-8")
    assert "poll" in text and "deploy" in text
    assert not CONTROL.findall(text), sorted(set(CONTROL.findall(text)))


# -- defect 11: the output is one of the inputs -------------------------------------------
@pytest.mark.parametrize("fmt", ["text", "json", "html"])
def test_output_that_is_an_input_is_refused(tmp_path: Path, fmt: str) -> None:
    """``replay t.jsonl -o t.jsonl`` refuses (usage error) and leaves the trace intact."""
    trace = traces.write(tmp_path / "t.jsonl", "loopwarden", LOOP)
    before = trace.read_bytes()
    ran = replay(str(trace), "-o", str(trace), "--format", fmt)
    assert trace.read_bytes() == before, "the trace was overwritten"
    assert ran.code == 2
    assert "t.jsonl" in ran.err


def test_output_inside_an_input_folder_is_refused(tmp_path: Path) -> None:
    """Writing the report over a trace found in a folder given as input is refused too."""
    trace = traces.write(tmp_path / "t.jsonl", "loopwarden", LOOP)
    before = trace.read_bytes()
    ran = replay(str(tmp_path), "-o", str(trace), "--format", "json")
    assert trace.read_bytes() == before
    assert ran.code == 2


def test_failed_replay_leaves_an_existing_report_alone(tmp_path: Path) -> None:
    """A usage error (unknown input) does not truncate an existing report file."""
    report = tmp_path / "report.json"
    report.write_bytes(b'{"old": true}')
    ran = replay(str(tmp_path / "missing.jsonl"), "-o", str(report), "--format", "json")
    assert ran.code == 2
    assert report.read_bytes() == b'{"old": true}'


# -- defect 12: a malformed first line ------------------------------------------------------
@pytest.mark.parametrize(
    "first",
    [b"\xff\xfe\x00binary\x01\n", b"{not json\n", b"[1, 2\n"],
    ids=["binary", "garbage", "truncated"],
)
def test_malformed_first_line_is_one_problem(tmp_path: Path, first: bytes) -> None:
    """A malformed first line is reported as ``file:1`` and the rest of the file is replayed."""
    trace = tmp_path / "t.jsonl"
    trace.write_bytes(first + traces.loopwarden_record(LOOP))
    ran = replay(str(trace), "--format", "json", *SMALL_SETS)
    assert ran.code == 0
    report = orjson.loads(ran.stdout)
    assert [run["calls"] for run in report["runs"]] == [6]
    assert [p["where"] for p in report["problems"]] == [f"{trace}:1"]


def test_malformed_later_line_is_one_problem(tmp_path: Path) -> None:
    """A malformed line after the first is skipped as ``file:N`` (the documented behaviour)."""
    lines = traces.loopwarden_record(LOOP).splitlines(keepends=True)
    trace = tmp_path / "t.jsonl"
    trace.write_bytes(lines[0] + b"\xff\xfe\x00binary\n" + b"".join(lines[1:]))
    ran = replay(str(trace), "--format", "json", *SMALL_SETS)
    assert ran.code == 0
    report = orjson.loads(ran.stdout)
    assert [run["calls"] for run in report["runs"]] == [6]
    assert [p["where"] for p in report["problems"]] == [f"{trace}:2"]


# -- defect 21: one OTel trace held whole -----------------------------------------------------
def otel_file(path: Path, spans: int) -> Path:
    """``spans`` tool spans of one trace, each with a distinct 2 KiB result, one per line."""
    with path.open("wb") as fh:
        for n in range(spans):
            span = traces.otel_span("0af7651916cd43dd", n, "fetch", {"page": n}, f"{n:08d}" * 256)
            fh.write(orjson.dumps(span) + b"\n")
    return path


@pytest.mark.slow
def test_large_otel_trace_replays_in_bounded_memory(tmp_path: Path) -> None:
    """Replaying 40,000 spans of one trace needs about the memory of 4,000."""
    small = replay(str(otel_file(tmp_path / "small.jsonl", 4_000)), "--format", "json")
    large = replay(str(otel_file(tmp_path / "large.jsonl", 40_000)), "--format", "json")
    assert small.code == large.code == 0
    assert orjson.loads(large.stdout)["totals"]["calls"] == 40_000
    grown = large.peak - small.peak
    assert grown < 32 * MiB, f"peak RSS grew by {grown / MiB:.0f} MiB for 36,000 more spans"


# -- found by this suite ----------------------------------------------------------------------
@pytest.mark.parametrize("damage", ["truncated", "not-gzip"])
def test_corrupt_gzip_is_reported_clearly(tmp_path: Path, damage: str) -> None:
    """A truncated or non-gzip ``.gz`` input is skipped with a plain message, not an
    "internal error" (which asks the user to report a bug); the other inputs replay."""
    data = gzip.compress(traces.loopwarden_record(LOOP))
    bad = tmp_path / "bad.jsonl.gz"
    bad.write_bytes(data[: len(data) // 2] if damage == "truncated" else b"not gzip at all")
    traces.write(tmp_path / "good.jsonl", "loopwarden", LOOP)
    ran = replay(str(tmp_path), "--format", "json")
    assert ran.code == 0
    assert "bad.jsonl.gz" in ran.err
    assert_clean_stderr(ran)


def test_json_document_replays_under_a_modest_address_space_limit(tmp_path: Path) -> None:
    """A small JSON-document trace replays under ``ulimit -v`` 768 MiB (containers set such
    limits); today every document asks ``read()`` for 1 GiB at once and gets MemoryError."""
    doc = tmp_path / "trace.json"
    items = [orjson.loads(line) for line in traces.chat(LOOP).splitlines()]
    doc.write_bytes(orjson.dumps(items, option=orjson.OPT_INDENT_2))  # pretty: a document
    ran = replay(str(doc), "--format", "json", max_as=768 * MiB)
    assert_clean_stderr(ran)
    assert ran.code == 0
    assert [run["calls"] for run in orjson.loads(ran.stdout)["runs"]] == [6]


# -- hypothesis: hostile trace files ------------------------------------------------------------
_JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=10),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=8,
)
_TOOLS = st.sampled_from(["poll", "Bash", "exec", "process", "message"]) | st.text(max_size=8)


@st.composite
def trace_files(draw: st.DrawFn) -> tuple[str, bytes]:
    """(file name, bytes): a real trace of some format, then mangled line by line."""
    fmt = draw(st.sampled_from(traces.FORMATS))
    call = st.tuples(_TOOLS, _JSON_VALUES, _JSON_VALUES)
    calls = draw(st.lists(call, min_size=1, max_size=6))
    calls = calls * draw(st.integers(1, 4))  # repeats make loops, so the guard acts
    lines = traces.BUILDERS[fmt](calls).splitlines()
    for _ in range(draw(st.integers(0, 4))):
        op = draw(st.sampled_from(["drop", "dup", "swap", "cut", "junk", "blank", "retype"]))
        at = draw(st.integers(0, max(0, len(lines) - 1)))
        if not lines:
            break
        if op == "drop":
            del lines[at]
        elif op == "dup":
            lines.insert(at, lines[at])
        elif op == "swap":
            other = draw(st.integers(0, len(lines) - 1))
            lines[at], lines[other] = lines[other], lines[at]
        elif op == "cut":
            lines[at] = lines[at][: draw(st.integers(0, len(lines[at])))]
        elif op == "junk":
            lines[at] = draw(st.binary(max_size=12))
        elif op == "blank":
            lines.insert(at, b"   ")
        else:  # a field of the record replaced by a value of another type
            try:
                record = orjson.loads(lines[at])
            except orjson.JSONDecodeError:
                continue
            if isinstance(record, dict) and record:
                key = draw(st.sampled_from(sorted(record)))
                record[key] = draw(_JSON_VALUES)
                lines[at] = orjson.dumps(record)
    body = b"\n".join(lines) + b"\n"
    shape = draw(st.sampled_from(["jsonl", "jsonl", "document", "gzip", "bom"]))
    if shape == "document":
        try:
            records = [orjson.loads(line) for line in lines if line.strip()]
            body = orjson.dumps(records, option=orjson.OPT_INDENT_2)
        except orjson.JSONDecodeError:
            pass
        return f"{fmt}.json", body
    if shape == "gzip":
        return f"{fmt}.jsonl.gz", gzip.compress(body)
    if shape == "bom":
        body = b"\xef\xbb\xbf" + body
    return f"{fmt}.jsonl", body


@pytest.mark.slow
def test_hostile_trace_files_never_crash_replay(tmp_path: Path) -> None:
    """A folder of mangled traces of every format replays with exit 0 or 2, valid JSON on
    stdout, every input accounted for, and no internal error."""
    files: list[tuple[str, bytes]] = []

    from tests.adversarial._values import examples

    @examples(60)
    @given(trace_files())
    def collect(item: tuple[str, bytes]) -> None:
        files.append(item)

    collect()
    for index, (name, data) in enumerate(files):
        (tmp_path / f"{index:03d}-{name}").write_bytes(data)
    ran = replay(str(tmp_path), "--format", "json", *SMALL_SETS)
    assert ran.code in (0, 2), ran.err
    report = orjson.loads(ran.stdout)
    assert len(report["inputs"]) == len(files)
    broken = [i for i in report["inputs"] if "internal error" in (i["error"] or "")]
    assert not broken, broken
    assert "Traceback" not in ran.err
