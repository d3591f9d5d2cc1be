"""Screenshots of the Streams pages for docs/ui.md (`make ui-screenshots`): the stream of
dev/ui_seed.py (snapshots, a rollback, a failed validation, DR copies, a clone) behind a real
`airflow api-server`, signed in through Airflow's login page in headless Chromium, each page
taken whole at 1400 px wide into docs/ui/. The same seeding and server as the browser test
(tests/integration/test_ui_browser.py). Takes about half a minute.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from dev import ui_seed  # noqa: E402

OUT = REPO / "docs" / "ui"
# Paths the pages show: the same on every run, so regenerated PNGs differ only where the pages do.
STREAMS_ROOT = Path(tempfile.gettempdir()) / "streamstate-ui"
WIDTH, HEIGHT = 1400, 900


# (file, the page's path for the seeded stream, what shows the page has rendered)
PAGES: list[tuple[str, Callable[[ui_seed.SeededStream], str], str]] = [
    ("streams.png", lambda s: "/streamstate/streams", f"#streams tr[data-stream='{ui_seed.STREAM}']"),
    ("history.png", lambda s: f"/streamstate/streams/{ui_seed.STREAM}", "svg#history"),
    ("snapshot-failed.png", lambda s: f"/streamstate/streams/{ui_seed.STREAM}/snapshots/{s.failed}",
     ".validation.failed"),
]
IN_AIRFLOW = "airflow-view.png"  # Browse > Streams inside Airflow's own UI


def take(out: Path) -> list[Path]:
    """Seed, serve, sign in, and write the PNGs into `out`; returns them."""
    shutil.rmtree(STREAMS_ROOT, ignore_errors=True)
    home = Path(tempfile.mkdtemp(prefix="streamstate-ui-airflow-"))
    written: list[Path] = []
    try:
        seeded = ui_seed.seed_stream(STREAMS_ROOT)
        with ui_seed.api_server(home) as server:
            ui_seed.publish(server, seeded)
            with ui_seed.browser(width=WIDTH, height=HEIGHT) as driver:
                ui_seed.sign_in(driver, server, ui_seed.VIEWER)
                for name, path, ready in PAGES:
                    driver.get(server.url + path(seeded))
                    ui_seed.wait_for(driver, ready)
                    _settle(driver)
                    ui_seed.full_page_screenshot(driver, out / name, width=WIDTH, min_height=HEIGHT)
                    written.append(out / name)
                driver.get(server.url + "/plugin/streams")
                driver.switch_to.frame(ui_seed.wait_for(driver, "iframe"))
                ui_seed.wait_for(driver, f"#streams tr[data-stream='{ui_seed.STREAM}']")
                _settle(driver)
                driver.switch_to.default_content()
                driver.save_screenshot(str(out / IN_AIRFLOW))
                written.append(out / IN_AIRFLOW)
    finally:
        shutil.rmtree(home, ignore_errors=True)
        shutil.rmtree(STREAMS_ROOT, ignore_errors=True)
    return written


def _settle(driver: Any) -> None:
    """Wait until the page's own requests are answered (the Streams page fetches Kafka lag)."""
    from selenium.webdriver.support.ui import WebDriverWait

    WebDriverWait(driver, 30).until(lambda d: not d.execute_script(
        "return Array.from(document.querySelectorAll('td[data-lag-url]')).some(c => c.textContent === '…')"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT, help=f"where the PNGs go (default {OUT})")
    args = parser.parse_args(argv)
    started = time.monotonic()
    args.out.mkdir(parents=True, exist_ok=True)
    for path in take(args.out):
        print(f"wrote {path}")
    print(f"done in {time.monotonic() - started:.0f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
