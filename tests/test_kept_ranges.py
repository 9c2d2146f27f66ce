"""The record of a dataset's ranged files kept on the job: read back, and whether it still
speaks for the destination."""

from __future__ import annotations

from typing import Any

from stork.server.kept_ranges import KEY, KeptFile, KeptRanges, read, worth_keeping
from stork.transfer.destination import Destination, DestKind, FileId

CLAIM = Destination("file:///out/big.dat", DestKind.REGULAR, created=True,
                    file=FileId("8:1234", 0, "1"))


def test_what_is_written_reads_back_and_a_whole_file_leaves_the_record() -> None:
    saved: list[dict[str, Any]] = []
    kept = KeptRanges(None, {}, saved.append)
    assert kept.choose_size(4 << 20) == 4 << 20 and kept.choose_size(8 << 20) == 4 << 20
    kept.claim({7: CLAIM, 9: CLAIM})
    kept.land(7, [(0, 8)], whole=False)
    kept.land(9, [(0, 16)], whole=True)
    size, files = read(saved[-1])
    assert size == 4 << 20
    assert files == {7: KeptFile(CLAIM, ((0, 8),))}
    assert [f.claim for f in kept.drop([7, 9])] == [CLAIM]
    assert read(saved[-1]) == (4 << 20, {})


def test_an_unreadable_record_keeps_nothing_and_a_bad_entry_only_itself() -> None:
    assert read({KEY: "junk"}) == (None, {})
    good = KeptFile(CLAIM, ((0, 4),)).to_json()
    size, files = read({KEY: {"range_bytes": -1, "files": {"1": good, "2": {"claim": "x"},
                                                          "3": {"landed": [[0, 1]]}}}})
    assert size is None and list(files) == [1]


def test_ranges_are_worth_keeping_only_while_the_destination_can_hold_them() -> None:
    kept = KeptFile(CLAIM, ((0, 8), (12, 16)))
    assert worth_keeping(kept, 16, 20)
    assert worth_keeping(kept, 20, 20)
    assert not worth_keeping(kept, 15, 20)  # truncated or replaced since
    assert not worth_keeping(kept, None, 20)  # gone
    assert not worth_keeping(KeptFile(CLAIM), 16, 20)  # nothing landed
    assert not worth_keeping(KeptFile(CLAIM, ((0, 20),)), 20, 20)  # whole: checked as a whole
