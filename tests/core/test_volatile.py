"""The volatile-counter masker: each token class is masked, progress stays distinct."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loopwarden.profiles.volatile import (
    BUILTIN_CLASS_NAMES,
    DEFAULT_MASKER,
    MIN_LENGTH,
    VolatileMasker,
    error_excerpt,
    mask_volatile,
)


def same(a: str, b: str) -> bool:
    return mask_volatile(a) == mask_volatile(b)


class TestTokenClasses:
    """Two results that differ only by one volatile token mask to the same text."""

    @pytest.mark.parametrize(
        ("a", "b"),
        [
            (
                "/bin/bash: line 18516: cd: fastjson/: No such file or directory",
                "/bin/bash: line 18531: cd: fastjson/: No such file or directory",
            ),
            ("sh: 1: javac: not found", "sh: 2: javac: not found"),
            ("bash: line 3: foo: command not found", "bash: line 44: foo: command not found"),
            ("zsh:1: command not found: foo", "zsh:12: command not found: foo"),
        ],
    )
    def test_shell_line_counter(self, a: str, b: str) -> None:
        """A shell's per-invocation line counter in its error prefix is masked."""
        assert same(a, b)
        assert "#" in mask_volatile(a)

    def test_viewer_counters(self) -> None:
        """A file viewer's "(N lines total)" and "(N more lines above/below)" are masked."""
        a = "[File: /r/A.java (443 lines total)]\n(12 more lines above)\n13:x\n(1 more line below)"
        b = "[File: /r/A.java (444 lines total)]\n(13 more lines above)\n13:x\n(2 more line below)"
        assert same(a, b)
        assert "(# lines total)" in mask_volatile(a)

    @pytest.mark.parametrize(
        ("a", "b"),
        [
            ("deployed at 2024-08-21T04:11:38Z by ci", "deployed at 2024-08-21T04:12:01Z by ci"),
            ("--2024-08-21 04:11:38--  https://x", "--2024-08-21 05:06:20--  https://x"),
            (
                "stamp 2024-08-20 02:25:22.085383301 +0000 ok",
                "stamp 2024-08-20 02:25:23.1 +0000 ok",
            ),
            ("Date: Tue, 15 Nov 1994 08:12:31 GMT", "Date: Tue, 15 Nov 1994 08:12:59 GMT"),
            ("Thu Dec  1 05:54:00 UTC 2025 here", "Thu Dec  1 05:55:10 UTC 2025 here"),
        ],
    )
    def test_timestamps(self, a: str, b: str) -> None:
        """ISO 8601 and RFC 2822 / `date` times of day are masked."""
        assert same(a, b)
        assert "<time>" in mask_volatile(a)

    @pytest.mark.parametrize(
        ("a", "b"),
        [
            ("===== 5 passed in 0.53s =====", "===== 5 passed in 0.61s ====="),
            ("build took 12ms total", "build took 340ms total"),
            ("Ran 3 tests in 0.001s\n\nOK", "Ran 3 tests in 0.004s\n\nOK"),
            ("real\t0m0.003s\nuser\t0m0.001s", "real\t0m1.203s\nuser\t0m0.901s"),
            ("Wall time: 3.1 seconds here", "Wall time: 12 seconds here"),
            ("request done (0.25s) fine", "request done (1.5s) fine"),
        ],
    )
    def test_elapsed_times(self, a: str, b: str) -> None:
        """Durations after "in", "took", "time:", "real"... or in brackets are masked."""
        assert same(a, b)
        assert "<dur>" in mask_volatile(a)

    @pytest.mark.parametrize(
        ("a", "b"),
        [
            ("Process Group PGID: 4242 started", "Process Group PGID: 4250 started"),
            ("Background PIDs: 12, 13 running", "Background PIDs: 20, 21 running"),
            ("<Process name='w' pid=4242 parent=1>", "<Process name='w' pid=777 parent=1>"),
            ("server PID: 31337 listening", "server PID: 31400 listening"),
        ],
    )
    def test_process_ids(self, a: str, b: str) -> None:
        """Process ids, including Gemini CLI's "Process Group PGID: <n>", are masked."""
        assert same(a, b)

    def test_memory_addresses(self) -> None:
        """Object addresses such as 0x7fa132cfd130 are masked; short hex constants are kept."""
        assert same(
            "<Conn object at 0x7fa132cfd130>: Failed", "<Conn object at 0x7f0b51d775e0>: Failed"
        )
        assert not same("flags = 0x10 here ok", "flags = 0x20 here ok")

    def test_temp_paths(self) -> None:
        """Random temp names under /tmp (Python tempfile, mktemp, pytest) are masked."""
        assert same(
            "wrote /tmp/tmp47t8jge7/app/0001_initial.py",
            "wrote /tmp/tmp1d957d20/app/0001_initial.py",
        )
        assert same("in /tmp/tmp.AbCdEf1234/x done", "in /tmp/tmp.ZyXwVu9876/x done")
        assert same(
            "at /tmp/pytest-of-root/pytest-12/test0 fail",
            "at /tmp/pytest-of-root/pytest-13/test0 fail",
        )

    def test_uuids(self) -> None:
        """UUIDs are masked whatever their letters and digits."""
        assert same(
            "Created s0 with id: 864ac743-e202-4492-876c-47fdd9cd136d done",
            "Created s0 with id: 237e4432-97f3-48fb-90ff-a407f14916b7 done",
        )


class TestProgressStaysDistinct:
    """Look-alikes of volatile tokens that are real progress keep their difference."""

    @pytest.mark.parametrize(
        ("a", "b"),
        [
            ("processed 10 items so far", "processed 20 items so far"),
            ("===== 5 passed in 0.53s =====", "===== 6 passed in 0.53s ====="),
            (
                "FAILED tests/a.py::t - 3 failed, 2 passed",
                "FAILED tests/a.py::t - 2 failed, 3 passed",
            ),
            ("a.py:12:34: E501 line too long", "a.py:13:34: E501 line too long"),
            ("error at line 5 of config", "error at line 6 of config"),
            ("/root/run.sh: line 194: foo: not found", "/root/run.sh: line 200: foo: not found"),
            ("ETA 7s remaining for download", "ETA 6s remaining for download"),
            ("about 3 minutes remaining now", "about 2 minutes remaining now"),
            ("job 41 of 50 finished ok", "job 42 of 50 finished ok"),
            ("Step 3/10: building layer", "Step 4/10: building layer"),
            ("process 3 of 9 running now", "process 4 of 9 running now"),
            ("order id: 12345 confirmed", "order id: 12346 confirmed"),
            ("flight on 2024-05-10 at gate", "flight on 2024-05-11 at gate"),
            ("/tmp/results_a.txt written", "/tmp/results_b.txt written"),
        ],
    )
    def test_look_alikes(self, a: str, b: str) -> None:
        """A changing count, test summary, position, date or file name is not masked."""
        assert not same(a, b)

    @given(st.lists(st.text(alphabet="abcxyz 0123456789:-.", min_size=1, max_size=12), max_size=8))
    @settings(max_examples=200, deadline=None)
    def test_growing_list(self, items: list[str]) -> None:
        """Adding a distinct line to a listing always changes the masked text."""
        listing = "files:\n" + "\n".join(f"item_{i}: {x}" for i, x in enumerate(items))
        grown = listing + f"\nitem_{len(items)}: new entry"
        assert mask_volatile(grown) != mask_volatile(listing)

    @given(st.integers(0, 10**6), st.integers(0, 10**6))
    @settings(max_examples=200, deadline=None)
    def test_bare_counts(self, a: int, b: int) -> None:
        """Two reports that differ by a bare count differ after masking."""
        if a != b:
            assert not same(f"processed {a} items, {a} ok", f"processed {b} items, {b} ok")


class TestBehaviour:
    def test_short_text_is_returned_as_is(self) -> None:
        """Text shorter than MIN_LENGTH is never scanned."""
        text = "in 0.5s"
        assert len(text) < MIN_LENGTH
        assert mask_volatile(text) is text

    def test_token_that_is_the_whole_result_is_kept(self) -> None:
        """A result that is only a timestamp or an id is the information itself."""
        assert mask_volatile("2024-08-21T04:11:38Z") == "2024-08-21T04:11:38Z"
        assert mask_volatile("  13:30:08  ") == "  13:30:08  "

    def test_unchanged_text_is_the_same_object(self) -> None:
        """No token: the very same string comes back (no copy, same hash)."""
        text = "nothing volatile in this line at all, 42 items"
        assert mask_volatile(text) is text

    def test_class_can_be_switched_off(self) -> None:
        """``without`` drops a built-in class; the others still apply."""
        masker = DEFAULT_MASKER.without("clock_time")
        text = "at 13:30:08 the build took 12ms total"
        assert "13:30:08" in masker.mask(text)
        assert "<dur>" in masker.mask(text)
        assert "clock_time" not in masker.classes

    def test_extra_patterns(self) -> None:
        """User patterns are masked too, after the built-in classes."""
        masker = VolatileMasker().with_patterns([r"build #\d+"])
        assert masker.mask("finished build #41 in 3s") == masker.mask("finished build #42 in 3s")
        assert masker.extra_patterns[0].pattern == r"build #\d+"

    def test_no_classes(self) -> None:
        """A masker without classes leaves text alone."""
        masker = VolatileMasker(classes=())
        text = "/bin/bash: line 12: x: not found"
        assert masker.mask(text) == text

    def test_unknown_class_is_an_error(self) -> None:
        """Naming a class that does not exist fails with the list of known ones."""
        with pytest.raises(ValueError, match="known: shell_line"):
            VolatileMasker(classes=["shell_lines"])

    def test_mask_value(self) -> None:
        """Strings inside mappings and lists are masked; keys and other leaves are kept."""
        value = {"out": ["bash: line 7: x: not found here"], "code": 127, "at": None}
        assert DEFAULT_MASKER.mask_value(value) == {
            "out": ["bash: line #: x: not found here"],
            "code": 127,
            "at": None,
        }

    def test_non_ascii_and_surrogates(self) -> None:
        """Non-ASCII text and lone surrogates survive masking unchanged around the tokens."""
        text = "héllo wörld \ud800 took 12ms — fin"
        assert mask_volatile(text) == "héllo wörld \ud800 took <dur> — fin"

    @given(st.text(max_size=300))
    @settings(max_examples=300, deadline=None)
    def test_never_raises_and_is_idempotent(self, text: str) -> None:
        """Any text can be masked, and masking twice changes nothing more."""
        once = mask_volatile(text)
        assert mask_volatile(once) == once

    def test_builtin_names(self) -> None:
        """Every documented class name is accepted by ``without``."""
        for name in BUILTIN_CLASS_NAMES:
            assert name not in DEFAULT_MASKER.without(name).classes


class TestErrorExcerpt:
    def test_first_line_masked(self) -> None:
        """The excerpt is the first line with its counters masked."""
        assert (
            error_excerpt("/bin/bash: line 62215: javac: command not found\nmore")
            == "/bin/bash: line #: javac: command not found"
        )

    def test_header_line_joined(self) -> None:
        """A bare header such as "ERROR:" is joined with the line that explains it."""
        text = "ERROR:\nParameter `file_text` is required for command: create."
        assert (
            error_excerpt(text) == "ERROR: Parameter `file_text` is required for command: create."
        )

    def test_traceback_uses_last_line(self) -> None:
        """A Python traceback is summarised by its last line."""
        text = "Traceback (most recent call last):\n  File \"a.py\", line 1\nKeyError: 'x'"
        assert error_excerpt(text) == "KeyError: 'x'"

    def test_bounded(self) -> None:
        """A huge error costs a bounded amount and gives a short excerpt."""
        assert len(error_excerpt("x" * 1_000_000)) <= 160
        assert error_excerpt("") == ""
