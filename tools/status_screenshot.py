"""Take docs/status_page.png: the status page of a real stork_server with a dataset job
running, after real transfers over loopback GridFTP (two EOS optimizations, a failure).

    .venv/bin/python tools/status_screenshot.py [--out docs/status_page.png]

The dataset is held between two calls (its next globus-url-copy held before it starts)
while the picture is taken, so the progress bar shows part of the files done; then it is
let go and the daemon stopped.
"""

from __future__ import annotations

import argparse
import secrets
import shutil
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.browser import Freezer, chromium, missing_browser  # noqa: E402
from tests.support import GridFtpServer, StorkServer, free_port, make_file, wait_for  # noqa: E402

TOKEN = secrets.token_hex(16)  # this run's daemon only


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--out", default=str(REPO / "docs" / "status_page.png"))
    args = p.parse_args()
    why = missing_browser()
    if why:
        print(why, file=sys.stderr)
        return 1
    work = Path(tempfile.mkdtemp(prefix="stork-shot-"))
    try:
        with GridFtpServer(work / "gridftp") as gridftp:
            take(work, gridftp, args.out)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"wrote {args.out}")
    return 0


def take(work: Path, gridftp: GridFtpServer, out: str) -> None:
    data = work / "gridftp" / "data"
    (data / "run42").mkdir(parents=True)
    big = make_file(data / "calib.h5", 48 << 20)
    local = make_file(work / "reco.root", 48 << 20, seed=2)
    for i in range(40):
        with open(data / "run42" / f"event{i:03d}.dat", "wb") as handle:
            handle.truncate(16 << 20)
    token_file = work / "api.token"
    token_file.write_text(TOKEN)
    token_file.chmod(0o600)
    port = free_port()
    freezer = Freezer(work / "freezer")
    server = StorkServer(work / "daemon", {**freezer.knobs,
        "STORK_API_ADDRESS": f"127.0.0.1:{port}", "STORK_API_TOKEN_FILE": str(token_file),
        "STORK_MAX_NUM_JOBS": "1", "STORK_LINK_MBPS": "2", "EOS_SAMPLE_TIME": "1"})
    driver = None
    with server:
        assert server.proc is not None
        ids = server.submit(f"""
          [ dap_type = transfer; src_url = "{gridftp.url(big)}";
            dest_url = "file://{work}/calib.h5"; optimization = "eos" ]
          [ dap_type = transfer; src_url = "file://{local}";
            dest_url = "{gridftp.url(data / 'reco.root')}"; optimization = "eos" ]
          [ dap_type = transfer; src_url = "{gridftp.url(data / 'missing.h5')}";
            dest_url = "file://{work}/missing.h5" ]""")
        for i in range(4):
            ids += server.submit(f"""[ dap_type = transfer; src_url = "{gridftp.url(big)}";
              dest_url = "file://{work}/copy{i}.h5"; arguments = "-p {2 ** i}" ]""")
        for job in ids:
            server.wait_state(job, timeout_s=120)
        [dataset] = server.submit(f"""[ dap_type = transfer; arguments = "-cc 1 -p 4";
          src_url = "{gridftp.url(data / 'run42')}/"; dest_url = "file://{work}/run42/" ]""")
        for _ in range(4):
            freezer.release()
            freezer.next_batch()
        server.submit(f"""
          [ dap_type = transfer; src_url = "{gridftp.url(big)}"; dest_url = "file://{work}/x.h5" ]
          [ dap_type = transfer; src_url = "file://{local}";
            dest_url = "{gridftp.url(data / 'y.root')}" ]""")
        try:
            driver = chromium(1400, 1250)
            driver.get(f"http://127.0.0.1:{port}/?every=1&hours=0.1#token={TOKEN}")
            wait_for(lambda: driver.find_elements(
                "css selector", f'#running tr[data-job="{dataset}"]'), 30, what="the page")
            seen = int(driver.find_element("id", "updated").get_attribute("data-count"))
            wait_for(lambda: int(driver.find_element("id", "updated").get_attribute(
                "data-count")) >= seen + 2, 30, what="two refreshes")
            driver.save_screenshot(out)
        finally:
            if driver is not None:
                driver.quit()
            freezer.release()


if __name__ == "__main__":
    sys.exit(main())
