"""How long the Dagster UI's pages take to show what they are for, in headless Chromium, over the instance and
store that ``dagster_scale.py --keep DIR`` left: the case_reports asset page, its Partitions page and the
evaluation_summary page (the 100,000-case target: each <= 5 s).

    python benchmarks/dagster_scale.py --cases 100000 --chunks 200 --keep /tmp/scale ...
    SQLCMP_TEST_CHROMIUM=/path/to/chromium python benchmarks/dagster_pages.py /tmp/scale --chunks 200

Each page is opened twice in one tab (the first opening also pays for the UI's own scripts, cached after) and
timed from the navigation to the first moment its content is on the page: the asset page's latest
materialization, the Partitions page's partition keys, the summary's ``pass_rate_%``. ``dagster-webserver``
serves the project's workspace.yaml with the same settings as the run (``SQLCMP_CASE_CHUNKS`` included).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
#: Each page, with the JavaScript condition that says its content is shown.
PAGES = {
    "asset page (case_reports)": ("/assets/case_reports", "document.body.innerText.includes('Latest materialization')"
                                                          " || document.body.innerText.includes('Materialized')"),
    "Partitions page (case_reports)": ("/assets/case_reports?view=partitions",
                                       "document.body.innerText.includes('{key}')"),
    "summary page (evaluation_summary)": ("/assets/evaluation_summary",
                                          "document.body.innerText.includes('pass_rate_%')"),
}
TARGET_SECONDS = 5.0


class Tab:
    """One tab of a headless Chromium over the DevTools protocol (as tests/test_dagster_ui.py drives it)."""

    def __init__(self, url: str) -> None:
        from websockets.sync.client import connect

        self.socket = connect(url, max_size=None)  # closed with the browser
        self.calls = 0

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        self.calls += 1
        self.socket.send(json.dumps({"id": self.calls, "method": method, "params": params}))
        while True:
            message = json.loads(self.socket.recv())
            if message.get("id") == self.calls:
                return message.get("result", {})

    def js(self, expression: str) -> Any:
        return self.call("Runtime.evaluate", expression=expression, returnByValue=True).get("result", {}).get("value")

    def timed(self, url: str, condition: str, limit: float = 120) -> float:
        """Seconds from navigating to ``url`` until ``condition`` holds."""
        self.call("Page.navigate", url="about:blank")
        started = time.monotonic()
        self.call("Page.navigate", url=url)
        while time.monotonic() - started < limit:
            if self.js(f"!!(document.body && ({condition}))"):
                return time.monotonic() - started
            time.sleep(0.05)
        return float("inf")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("work", type=Path, help="the folder dagster_scale.py --keep left")
    parser.add_argument("--chunks", type=int, default=0, help="SQLCMP_CASE_CHUNKS of the run")
    parser.add_argument("--db-dir", type=Path, help="the suite's databases (as given to dagster_scale.py)")
    args = parser.parse_args()
    home = args.work / "dagster_home"
    port = free_port()
    env = {**os.environ, "DAGSTER_HOME": str(home), "SQLCMP_STORAGE_DIR": str(args.work / "store"),
           "SQLCMP_CASES_DIR": str(args.work / "cases"), "SQLCMP_CASE_CHUNKS": str(args.chunks),
           **({"SQLCMP_DB_DIR": str(args.db_dir)} if args.db_dir else {})}
    server = subprocess.Popen([str(Path(sys.executable).with_name("dagster-webserver")), "-h", "127.0.0.1", "-p",
                               str(port), "-w", str(ROOT / "workspace.yaml")], cwd=ROOT, env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    with tempfile.TemporaryDirectory() as profile:
        browser = None
        try:
            deadline = time.monotonic() + 180
            while True:
                try:
                    urllib.request.urlopen(base + "/server_info", timeout=2).read()
                    break
                except OSError:
                    if time.monotonic() > deadline or server.poll() is not None:
                        sys.exit("dagster-webserver did not answer")
                    time.sleep(0.5)
            browser = subprocess.Popen([os.environ["SQLCMP_TEST_CHROMIUM"], "--headless", "--no-sandbox",
                                        "--disable-gpu", "--no-first-run", f"--user-data-dir={profile}",
                                        "--remote-debugging-port=0", "--window-size=1400,1000", "about:blank"],
                                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            port_file = Path(profile, "DevToolsActivePort")
            while not (port_file.is_file() and port_file.read_text().strip()):
                time.sleep(0.1)
            devtools = port_file.read_text().split()[0]
            targets = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{devtools}/json/list", timeout=10).read())
            tab = Tab(next(t for t in targets if t["type"] == "page")["webSocketDebuggerUrl"])
            key = "chunk-" if args.chunks else ""
            print(f"load {os.getloadavg()[0]:.1f}")
            for name, (path, condition) in PAGES.items():
                seconds = [tab.timed(base + path, condition.replace("{key}", key or "Partitions")) for _ in range(2)]
                verdict = "meets" if seconds[-1] <= TARGET_SECONDS else "MISSES"
                print(f"  {name:34} first {seconds[0]:6.2f} s, again {seconds[1]:6.2f} s "
                      f"(target <= {TARGET_SECONDS:g}: {verdict})")
            print(f"load {os.getloadavg()[0]:.1f}")
        finally:
            if browser is not None:
                browser.terminate()
                browser.wait(timeout=20)
            server.terminate()
            server.wait(timeout=30)


if __name__ == "__main__":
    main()
