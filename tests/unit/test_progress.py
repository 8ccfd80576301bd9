"""Issue 12, item 3: the progress values the use cases hand their callers (`core.progress`), and
the CLI's `live_work` when stdout is not a terminal: the lines alone, flushed one by one, the
reports ignored (no bar is drawn into a pipe or a file)."""

from __future__ import annotations

import io
import sys

import pytest

from ckpt_daemon.cli.output import live_work
from ckpt_daemon.core.progress import Counter, Progress


def test_counter_reports_each_start_and_finish_with_running_totals() -> None:
    seen: list[Progress] = []
    counter = Counter(seen.append, total=2, total_bytes=300)
    counter.start("/r/a.keras")
    counter.finish("/r/a.keras", "ok", 100)
    counter.start("/r/b.keras")
    counter.finish("/r/b.keras", "failed", 200, "hash differs")
    assert seen == [
        Progress("/r/a.keras", 0, 2, 0, 300),
        Progress("/r/a.keras", 1, 2, 100, 300, "ok"),
        Progress("/r/b.keras", 1, 2, 100, 300),
        Progress("/r/b.keras", 2, 2, 300, 300, "failed", "hash differs"),
    ]
    assert [p.finished for p in seen] == [False, True, False, True]


def test_a_counter_without_a_callback_still_counts() -> None:
    counter = Counter(None)
    counter.finish("x", "indexed", 5)
    counter.finish("y", "unchanged", -1)  # a size that could not be known counts nothing
    assert (counter.done, counter.bytes, counter.total) == (2, 5, None)


class Pipe(io.StringIO):
    """stdout as a pipe: not a terminal; counts flushes (each line must reach the reader)."""

    flushes = 0

    def isatty(self) -> bool:
        return False

    def flush(self) -> None:
        self.flushes += 1


def test_into_a_pipe_live_work_prints_escaped_lines_and_no_bar(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pipe = Pipe()
    monkeypatch.setattr(sys, "stdout", pipe)
    with live_work("checked", roots=["/r", "/r/inner"]) as work:
        work.update(Progress("/r/inner/a.keras", 0, 1, 0, 10))
        assert work.relative("/r/inner/a.keras") == "a.keras"  # its own, innermost root
        work.line("ok [red]a\x1b[2J.keras")
        assert pipe.getvalue() == "ok [red]a\\x1b[2J.keras\n" and pipe.flushes >= 1
        work.update(Progress("/r/inner/a.keras", 1, 1, 10, 10, "ok"))
    assert pipe.getvalue() == "ok [red]a\\x1b[2J.keras\n"  # nothing but the line


def test_json_never_gets_a_bar_even_on_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    class Terminal(Pipe):
        def isatty(self) -> bool:
            return True

    terminal = Terminal()
    monkeypatch.setattr(sys, "stdout", terminal)
    with live_work("checked", as_json=True) as work:
        work.update(Progress("/r/a.keras", 0, 3, 0, 30))
        work.update(Progress("/r/a.keras", 1, 3, 10, 30, "ok"))
    assert terminal.getvalue() == ""
