"""The user log is read back by HTCondor's own reader."""

from __future__ import annotations

from pathlib import Path

import htcondor2

from stork.userlog import UserLog, aborted, executing, note, submitted, terminated


def test_events_read_back_with_htcondor(tmp_path: Path) -> None:
    path = tmp_path / "job.log"
    log = UserLog(str(path), 17)
    log.submit(1_700_000_000, "DAG Node: stage_in")
    log.execute(1_700_000_001)
    log.generic(1_700_000_002, "attempt 1 exited with status 1: refused\n...\nsecond line")
    log.execute(1_700_000_010)
    log.terminated(1_700_000_020, 0, 52428800)
    UserLog(str(path), 18).aborted(1_700_000_030, "removed by alice via stork_rm")
    events = list(htcondor2.JobEventLog(str(path)).events(stop_after=0))
    kinds = [(int(e.type), e.cluster) for e in events]
    assert kinds == [(0, 17), (1, 17), (8, 17), (1, 17), (5, 17), (9, 18)]
    assert events[0]["LogNotes"] == "DAG Node: stage_in"
    assert "refused" in events[2]["Info"] and "second line" in events[2]["Info"]
    assert events[4]["ReturnValue"] == 0 and events[4]["TerminatedNormally"]
    assert events[4]["TotalSentBytes"] == 52428800
    assert events[5]["Reason"] == "removed by alice via stork_rm"
    assert events[1].timestamp - events[0].timestamp == 1


def test_log_events_as_values_read_back_with_htcondor(tmp_path: Path) -> None:
    """What the outcome judge returns (`LogEvent`s) is written by `UserLog.write`."""
    path = tmp_path / "values.log"
    log = UserLog(str(path), 5)
    for when, event in enumerate([submitted("notes"), executing(), note("attempt 1 failed"),
                                  terminated(1), aborted("removed by bob via stork_rm")]):
        log.write(1_700_000_000 + when, event)
    events = list(htcondor2.JobEventLog(str(path)).events(stop_after=0))
    assert [int(e.type) for e in events] == [0, 1, 8, 5, 9]
    assert events[0]["LogNotes"] == "notes" and events[3]["ReturnValue"] == 1
    assert events[4]["Reason"] == "removed by bob via stork_rm"
