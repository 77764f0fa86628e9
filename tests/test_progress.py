"""Progress: a bar on a terminal, a plain line every few seconds in a log, nothing for a quick phase.

A fake clock drives the log form (no test waits or times anything real);
the terminal form is a tqdm bar on a stream that says it is a terminal.
"""

from __future__ import annotations

import io
import sys
import types

import pytest

from irflow.util.progress import DELAY, INTERVAL, bar, phase, tracked


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture
def clock():
    return FakeClock()


def test_a_log_gets_a_plain_line_every_few_seconds_and_one_at_the_end(clock):
    assert (DELAY, INTERVAL) == (2.0, 5.0)
    log = io.StringIO()
    with bar(True, "embedding", total=5000, unit="record", unit_scale=True, stream=log, clock=clock) as shown:
        for seconds, records in [(1, 100), (2.5, 1000), (4, 100), (8, 1800), (9, 500), (40, 1500)]:
            clock.now = 100.0 + seconds
            shown.update(records)
    assert log.getvalue().splitlines() == [
        "embedding: 1,100/5,000 records (22%), 440 records/s, ETA 8.9s",  # the first after DELAY seconds
        "embedding: 3,000/5,000 records (60%), 375 records/s, ETA 5.3s",  # INTERVAL later (4 s was too soon)
        # 9 s: too soon again; at 40 s the phase is complete, which its last line says
        "embedding: 5,000/5,000 records (100%) in 40s, 125 records/s",
    ]
    assert "\r" not in log.getvalue()


def test_a_quick_phase_says_nothing_in_a_log(clock):
    log = io.StringIO()
    with bar(True, "tokenizing", total=10, unit="record", stream=log, clock=clock) as shown:
        clock.now += DELAY - 0.5
        shown.update(10)
    with phase(True, "postings", stream=log, clock=clock):
        clock.now += DELAY - 0.5
    assert log.getvalue() == ""


def test_a_long_phase_without_counts_says_its_time_in_a_log(clock):
    log = io.StringIO()
    with phase(True, "postings", stream=log, clock=clock):
        clock.now += 83
    assert log.getvalue() == "postings: done in 1m23s\n"


def test_bytes_and_unknown_totals_read_plainly(clock):
    log = io.StringIO()
    with bar(True, "reading r.jsonl", total=50 << 20, unit="B", unit_scale=True, stream=log, clock=clock) as shown:
        clock.now += 3
        shown.update(12 << 20)
    with bar(True, "evaluating", unit="query", stream=log, clock=clock) as shown:
        clock.now += 3
        shown.update(3)
    assert log.getvalue().splitlines() == [
        "reading r.jsonl: 12.0 MB/50.0 MB (24%), 4.0 MB/s, ETA 9.5s",
        "reading r.jsonl: 12.0 MB/50.0 MB (24%) in 3.0s, 4.0 MB/s",  # stopped early: the end says where
        "evaluating: 3 queries, 1.0 queries/s",
        "evaluating: 3 queries in 3.0s, 1.0 queries/s",
    ]


def test_a_terminal_gets_a_bar(clock):
    screen = Terminal()
    with bar(True, "embedding", total=50, unit="record", stream=screen, clock=clock) as shown:
        shown.update(50)
    with phase(True, "writing", stream=screen):
        pass
    drawn = screen.getvalue()
    assert "\r" in drawn  # redrawn in place
    assert "embedding: 100%" in drawn and "50/50" in drawn and "writing: 100%" in drawn


def test_a_notebook_gets_a_bar_too(monkeypatch):
    class KernelStream(io.StringIO):  # ipykernel's OutStream: not a terminal, but tqdm.auto draws a widget there
        pass

    KernelStream.__module__ = "ipykernel.iostream"
    monkeypatch.setitem(sys.modules, "ipykernel", types.ModuleType("ipykernel"))
    shown = bar(True, "embedding", total=5, unit="record", stream=KernelStream())
    assert type(shown).__module__.startswith("tqdm")
    shown.close()


def test_progress_off_writes_nothing_anywhere(clock):
    for stream in (io.StringIO(), Terminal()):
        with bar(False, "embedding", total=5, stream=stream, clock=clock) as shown:
            clock.now += 60
            shown.update(5)
        with phase(False, "writing", stream=stream, clock=clock):
            clock.now += 60
        assert stream.getvalue() == ""


def test_items_taken_one_by_one_are_counted_as_they_go(clock):
    log = io.StringIO()
    taken = []
    for i, item in enumerate(tracked(True, "checking records", list(range(5120)), unit="record", stream=log,
                                     clock=clock)):
        taken.append(item)
        clock.now = 100.0 + (i + 1) / 512  # 512 records a second: 1,024 (a step) every 2 s
    assert taken == list(range(5120))
    assert log.getvalue().splitlines() == [
        "checking records: 1,024/5,120 records (20%), 512 records/s, ETA 8.0s",
        "checking records: 4,096/5,120 records (80%), 512 records/s, ETA 2.0s",
        "checking records: 5,120/5,120 records (100%) in 10s, 512 records/s",
    ]
    # a generator has no length: counted without a total
    assert list(tracked(False, "checking records", (i for i in range(3)))) == [0, 1, 2]
