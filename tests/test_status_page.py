"""The status page in a real browser: Debian's Chromium, headless, driven through Selenium
and chromedriver, against a real stork_server moving real files over loopback GridFTP.

A dataset's progress is caught between calls without timing anything: each call of the
engine's one worker (`-cc 1`) is one globus-url-copy, which the daemon runs through the
test's wrapper (`tests.browser.Freezer`), where a call waits before it starts while the test
holds it. Once let go, the call held first moves its file while the next one waits, so
the page must show more files done than at the previous hold.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.browser import Freezer, chromium, missing_browser
from tests.support import GridFtpServer, StorkServer, free_port, wait_for

TOKEN = "status-page-test-token-0123456789"
FILES, FILE_BYTES = 20, 16 << 20  # "-cc 1": batches of 4 files (64 MiB), so 5 batches


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    why = missing_browser()
    if why:
        pytest.skip(why)
    driver = chromium()
    try:
        yield driver
    finally:
        driver.quit()


def tcp_daemon(tmp_path: Path, **knobs: Any) -> tuple[StorkServer, str]:
    token_file = tmp_path / "api.token"
    token_file.write_text(TOKEN)
    token_file.chmod(0o600)
    port = free_port()
    server = StorkServer(tmp_path / "daemon", {"STORK_API_ADDRESS": f"127.0.0.1:{port}",
                                               "STORK_API_TOKEN_FILE": str(token_file), **knobs})
    return server, f"http://127.0.0.1:{port}"


def read(driver: Any, script: str) -> Any:
    """Read the page in one JavaScript call: it redraws every 0.3 s, so an element found
    by one WebDriver call may be gone by the next."""
    return driver.execute_script(script)


def refreshes(driver: Any) -> int:
    return int(read(driver, "return document.getElementById('updated').dataset.count"))


def after_refresh(driver: Any) -> None:
    """Wait until the page has fetched the overview twice more (so it shows what is now)."""
    seen = refreshes(driver)
    wait_for(lambda: refreshes(driver) >= seen + 2, 20, what="two refreshes of the page")


def text_of(driver: Any, selector: str) -> str | None:
    return read(driver, f"const e = document.querySelector('{selector}'); "
                        "return e ? e.textContent : null")


def fraction(driver: Any, job_id: int) -> float | None:
    value = read(driver, f"const e = document.querySelector('#running tr[data-job=\"{job_id}\"] "
                         ".bar'); return e ? e.dataset.fraction : null")
    return None if value is None else float(value)


def row_ids(driver: Any, table: str) -> set[int]:
    return {int(i) for i in read(driver, f"return [...document.querySelectorAll("
                                         f"'#{table} tr[data-job]')].map(r => r.dataset.job)")}


def test_page_follows_a_dataset_and_a_removed_job_leaves(
        browser: Any, gridftp: GridFtpServer, gridftp_root: Path, tmp_path: Path) -> None:
    src = gridftp_root / f"status-{tmp_path.name}"
    src.mkdir()
    for i in range(FILES):
        with open(src / f"f{i:02d}.dat", "wb") as handle:
            handle.truncate(FILE_BYTES)  # sparse: the source costs no disk
    out = tmp_path / "out"
    freezer = Freezer(tmp_path / "freezer")
    server, base = tcp_daemon(tmp_path, STORK_MAX_NUM_JOBS=1, **freezer.knobs)
    try:
        server.start()
        freezer.hold()
        [dataset] = server.submit(f"""[ dap_type = transfer; arguments = "-cc 1 -p 1";
          src_url = "{gridftp.url(src)}/"; dest_url = "file://{out}/" ]""")
        freezer.next_batch()
        [waiting] = server.submit(f"""[ dap_type = transfer;
          src_url = "{gridftp.url(src / 'f00.dat')}"; dest_url = "file://{tmp_path}/one.dat" ]""")

        browser.get(f"{base}/?every=0.3#token={TOKEN}")
        wait_for(lambda: fraction(browser, dataset) is not None, 20, what="the running dataset")
        assert "token" not in browser.current_url  # the fragment is dropped at once
        after_refresh(browser)
        first = fraction(browser, dataset)
        assert first is not None and first < 1
        assert "slots full" in (text_of(browser, f'#waiting tr[data-job="{waiting}"] .reason')
                                or "")

        freezer.release()
        freezer.next_batch()  # the next call waits; the one let go lands its file
        wait_for(lambda: (fraction(browser, dataset) or 0) > first, 20,
                 what="the progress bar to advance")
        done = server.job(dataset)["job"]["files_done"]
        after_refresh(browser)
        progress = text_of(browser, f'#running tr[data-job="{dataset}"] .progress') or ""
        assert f"files {done}/{FILES}" in progress
        flow = f'#running tr[data-job="{dataset}"] svg.flow'  # the measured rate, drawn
        wait_for(lambda: float(read(browser, f"const e = document.querySelector('{flow}'); "
                                             "return e ? e.dataset.max : 0") or 0) > 0, 20,
                 what="the job's measured flow on the page")
        kept = server.api("GET", f"/v1/jobs/{dataset}/flow").json()
        assert len(kept["t"]) == len(kept["mbps"]) >= 2 and max(kept["mbps"]) > 0
        assert "flow" not in server.job(dataset)["job"]["result"]
        if os.environ.get("STORK_STATUS_SCREENSHOT"):  # the picture in docs/ (README)
            browser.save_screenshot(os.environ["STORK_STATUS_SCREENSHOT"])

        assert server.api("DELETE", f"/v1/jobs/{waiting}").status_code == 200
        wait_for(lambda: waiting not in row_ids(browser, "waiting"), 20,
                 what="the removed job to leave the queue")
        assert text_of(browser, '#counts [data-state="REMOVED"] b') == "1"

        freezer.release()
        server.wait_state(dataset, timeout_s=120)
        assert server.job(dataset)["job"]["state"] == "COMPLETED"
        wait_for(lambda: dataset not in row_ids(browser, "running"), 20,
                 what="the finished dataset to leave the running transfers")
        pairs = read(browser, "return [...document.querySelectorAll("
                              "'#linkchart polyline[data-pair]')].map(p => p.dataset.pair)")
        assert pairs == ["127.0.0.1 -> localhost"]
        assert browser.find_element("id", "banner").get_attribute("data-state") == "ok"
    finally:
        freezer.release()
        server.stop()
        shutil.rmtree(src, ignore_errors=True)


def test_bad_token_then_unreachable_daemon_are_said(browser: Any, tmp_path: Path) -> None:
    server, base = tcp_daemon(tmp_path)
    with server:
        browser.get(f"{base}/?every=0.3#token=not-the-token-at-all")
        banner = browser.find_element("id", "banner")
        wait_for(lambda: banner.get_attribute("data-state") == "token", 20,
                 what="the refused token to be said")
        assert "token was refused" in banner.text
        assert "STORK_API_TOKEN_FILE" in banner.text
        assert browser.find_element("id", "tokenform").is_displayed()

        browser.find_element("id", "token").send_keys(TOKEN)
        browser.find_element("css selector", "#tokenform button").click()
        wait_for(lambda: banner.get_attribute("data-state") == "ok", 20,
                 what="the page to load with the right token")
        states = read(browser, "return [...document.querySelectorAll('#counts .chip')]"
                               ".map(c => c.dataset.state)")
        assert set(states) == {"IDLE", "RUNNING", "COMPLETED", "FAILED", "REMOVED"}
    # the daemon is gone: the page says so and keeps trying
    wait_for(lambda: banner.get_attribute("data-state") == "unreachable", 20,
             what="the page to say the daemon is unreachable")
    assert "unreachable" in banner.text


def test_page_html_needs_no_token_and_loads_nothing_from_elsewhere(tmp_path: Path) -> None:
    server, base = tcp_daemon(tmp_path)
    with server:
        page = httpx.get(f"{base}/", timeout=10)
        assert page.status_code == 200
        assert page.headers["content-type"].startswith("text/html")
        for marker in ("http://", "https://", "//cdn", "@import"):
            assert marker not in page.text.replace("http://www.w3.org/2000/svg", "")
        assert httpx.get(f"{base}/v1/overview", timeout=10).status_code == 403
        overview = httpx.get(f"{base}/v1/overview", timeout=10,
                             headers={"Authorization": f"Bearer {TOKEN}"})
        assert overview.status_code == 200
        assert set(overview.json()["counts"]) == {"IDLE", "RUNNING", "COMPLETED", "FAILED",
                                                  "REMOVED"}
