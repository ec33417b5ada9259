"""Regenerate docs/images/quickstart-report.png, the README's picture of a real report: the top of the quickstart
report (its headline) as headless Chromium draws it.

    make quickstart                                  # the report to draw
    .venv/bin/python docs/tools/report_screenshot.py [REPORT_HTML]

REPORT_HTML defaults to the quickstart report in the results store (EVALCTL_CACHE).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "images" / "quickstart-report.png"
WINDOW = "1280,600"  # the headline sentence, its legend and its table


def main(argv: list[str]) -> int:
    from evalctl.results_store import results_root

    report = Path(argv[0]) if argv else results_root() / "reports" / "quickstart" / "report.html"
    browser = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    if not report.is_file():
        sys.exit(f"{report}: no report there; run `make quickstart` first, or give the report.html to draw")
    if browser is None:
        sys.exit("headless Chromium is needed (`apt-get install chromium` on Debian)")
    OUT.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                    f"--window-size={WINDOW}", f"--screenshot={OUT}", report.resolve().as_uri()],
                   check=True, capture_output=True, timeout=120)
    print(f"{OUT} ({OUT.stat().st_size:,} bytes) from {report}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
