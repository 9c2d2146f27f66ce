"""The pieces of protocol support that need no server: the ad's `checksum`, checksum
normalisation and choice, the gfal helper's exit statuses, the proxy checks' words."""

from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path

import pytest

from stork.errors import CredentialInvalid, SubmitError, VerifyError
from stork.submit import parse_submit
from stork.transfer import failures, gfalhelper
from stork.transfer.gfal import GfalModule
from stork.transfer.proxy import check_proxy, expiry_warning
from stork.transfer.registry import Registry
from stork.transfer.remote import common_checksum
from stork.transfer.verify import asked_twice, checksum_of, local_checksum, normalize, size_of
from tests.gsi import TestCa

REG = Registry.default()


def parse_checksum(value: str) -> str | None:
    [spec] = parse_submit(f'[ dap_type = transfer; src_url = "root://h//a"; '
                          f'dest_url = "file:///b"; checksum = "{value}" ]', "job.dap",
                          iwd="/w", registry=REG)
    return spec.checksum


def test_the_ads_checksum_is_type_and_value_normalised() -> None:
    assert parse_checksum("ADLER32:A1B2C3") == "adler32:00a1b2c3"
    assert parse_checksum("crc32c:0a1b2c3d") == "crc32c:0a1b2c3d"
    assert parse_checksum("md5:" + "F" * 32) == "md5:" + "f" * 32
    for bad, words in (("sha1:abc", "not TYPE:VALUE with TYPE one of adler32, crc32c, md5"),
                       ("adler32:xyz", "'xyz' is not a adler32 value"),
                       ("adler32:123456789", "is not a adler32 value (8 hex digits)"),
                       ("md5:abc", "is not an md5 value (32 hex digits)"),
                       ("0a1b2c3d", "not TYPE:VALUE")):
        with pytest.raises(SubmitError) as caught:
            parse_checksum(bad)
        assert "attribute 'checksum'" in str(caught.value) and words in str(caught.value)


def test_a_dataset_takes_verify_checksum_not_one_checksum() -> None:
    with pytest.raises(SubmitError, match="a dataset takes verify_checksum = true"):
        parse_submit('[ dap_type = transfer; src_url = "gsiftp://h/d/"; dest_url = "file:///o/";'
                     ' checksum = "adler32:00000001" ]', "job.dap", iwd="/w", registry=REG)


def test_checksums_compare_as_lower_case_hex() -> None:
    assert normalize("crc32c", "2mkKLQ==") == "da690a2d"  # an RFC 3230 digest (base64)
    assert normalize("adler32", "1a2b") == "00001a2b"  # servers drop leading zeros
    assert normalize("md5", "ABCDEF") == "abcdef"


def test_the_strongest_type_both_ends_answer() -> None:
    assert common_checksum("file", "root") == "md5"
    assert common_checksum("gsiftp", "davs") == "md5"
    assert common_checksum("root", "root") == "md5"
    assert common_checksum("file", "http") == "md5"
    assert common_checksum("iperf", "file") is None


def test_local_adler32_and_md5(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"Wikipedia")
    assert local_checksum(str(path), "adler32") == "11e60398"
    assert local_checksum(str(path), "md5") == \
        hashlib.md5(b"Wikipedia", usedforsecurity=False).hexdigest()


def test_the_gfal_helper_keeps_storks_exit_statuses() -> None:
    """The helper runs under another interpreter and cannot import Stork: its copy of the
    convention must stay equal."""
    for name in ("EXIT_RETRYABLE", "EXIT_PERMANENT", "EXIT_NOT_FOUND", "EXIT_ACCESS_DENIED",
                 "EXIT_DESTINATION_FULL", "EXIT_BAD_URL"):
        assert getattr(gfalhelper, name) == getattr(failures, name)


def test_the_gfal_module_judges_by_the_errno_gfal2_named() -> None:
    module = GfalModule()
    said = "gfal2 copy error: 111 (ECONNREFUSED): Connection error"
    assert module.judge(1, said).kind.value == "transient"
    assert type(module.judge(3, "gfal2 copy error: 2 (ENOENT): no such file")).__name__ == \
        "NotFound"
    assert type(module.judge(4, "anything")).__name__ == "AccessDenied"


def test_proxy_checks_name_the_file_and_the_reason(test_ca: TestCa, tmp_path: Path) -> None:
    good = test_ca.proxy(tmp_path / "good", valid="0:10")
    facts = check_proxy(str(good), owner_uid=os.getuid(), run_as=None)
    now = time.time()
    assert 0 < facts.seconds_left(now) <= 600
    assert expiry_warning(facts, now, 10**6, 1000.0) is None  # 8 ms at 1 Gbit/s
    warned = expiry_warning(facts, now, 10**12, 1000.0)  # 8000 s
    assert warned is not None and warned["x509proxy_expires_before_end"] is True
    not_pem = tmp_path / "not-a-proxy"
    not_pem.write_text("hello")
    with pytest.raises(CredentialInvalid, match="holds no PEM certificate: not a proxy"):
        check_proxy(str(not_pem), owner_uid=os.getuid(), run_as=None)
    with pytest.raises(CredentialInvalid, match=f"x509proxy {tmp_path}/nope: no such file"):
        check_proxy(str(tmp_path / "nope"), owner_uid=os.getuid(), run_as=None)
    with pytest.raises(CredentialInvalid, match="not a regular file"):
        check_proxy(str(tmp_path), owner_uid=os.getuid(), run_as=None)


def test_an_operator_modules_own_scheme_is_not_asked() -> None:
    """gfal2 speaks no `gate://`: its size is unknown (None), not a failed verification."""
    assert size_of("gate://h/x") is None
    with pytest.raises(VerifyError, match="gate:// ends cannot be asked for checksums"):
        checksum_of("gate://h/x", "md5")


def test_an_end_that_fails_one_answer_is_asked_again_and_a_second_failure_is_raised() -> None:
    answers: list[object] = [VerifyError("size", "gsiftp://a/x", "no answer"), 42]

    def ask() -> int:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        assert isinstance(answer, int)
        return answer

    assert asked_twice(ask, again_after_s=0.0) == 42
    answers[:] = [VerifyError("size", "gsiftp://a/x", "first"),
                  VerifyError("size", "gsiftp://a/x", "second"), 7]
    with pytest.raises(VerifyError, match="second"):
        asked_twice(ask, again_after_s=0.0)
    assert answers == [7]  # asked twice, not a third time
