"""The Streams pages in a real browser: headless Chromium (Debian's) driven by Selenium against
`airflow api-server` (the real CLI) on a home prepared as the demo's, signed in through
Airflow's own login page as a viewer. Without a session the API refuses and the browser is
sent to the login; signed in, the Streams page lists the stream with its state and newest
snapshot, its history shows two timelines after the rollback with the current one marked,
the snapshot whose validation failed says FAILED, and the view inside Airflow's UI
(/plugin/streams) renders the Streams page with an address without a doubled segment. The
seeding and the server are
dev/ui_seed.py's, shared with `make ui-screenshots`."""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from dev import ui_seed

pytestmark = [pytest.mark.integration, pytest.mark.browser]


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """One seeded server and one browser for the module. The browser opens the Streams page
    without a session, is sent to Airflow's login page, and signs in there as the viewer."""
    root = tmp_path_factory.mktemp("ui-browser")
    seeded = ui_seed.seed_stream(root / "streams")
    with ui_seed.api_server(root / "airflow") as server:
        try:
            ui_seed.publish(server, seeded)
            with ui_seed.browser() as driver:
                login_url = ui_seed.sign_in(driver, server, ui_seed.VIEWER)
                yield {"server": server, "seeded": seeded, "driver": driver, "login_url": login_url}
        except BaseException:
            print(f"--- {server.log} (last lines) ---\n{server.log_tail()}")
            raise


@pytest.fixture(autouse=True)
def _server_log_when_a_test_fails(request: pytest.FixtureRequest, site: dict[str, Any]) -> Iterator[None]:
    """The server's log, printed after a failed test (pytest shows it with the failure)."""
    failed = request.session.testsfailed
    yield
    if request.session.testsfailed > failed:
        print(f"--- {site['server'].log} (last lines) ---\n{site['server'].log_tail()}")


def test_without_a_session_the_api_refuses_and_the_browser_is_sent_to_the_login(site) -> None:
    server: ui_seed.ApiServer = site["server"]
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(server.url + "/streamstate/api/streams", timeout=30)
    assert refused.value.code in (401, 403)
    assert site["login_url"].startswith(server.url + "/auth/login?next=")


def test_the_streams_page_lists_the_stream_with_its_state_and_newest_snapshot(site) -> None:
    from selenium.webdriver.common.by import By

    driver, server, seeded = site["driver"], site["server"], site["seeded"]
    driver.get(server.url + "/streamstate/streams")
    row = ui_seed.wait_for(driver, f"#streams tr[data-stream='{ui_seed.STREAM}']")
    assert row.find_element(By.CSS_SELECTOR, ".state").text == "running"
    assert row.find_elements(By.CSS_SELECTOR, ".state-running")
    newest = row.find_element(By.CSS_SELECTOR, "td.newest a")
    assert newest.text == "batch 21"
    assert newest.get_attribute("href").endswith(f"/streamstate/streams/{ui_seed.STREAM}/snapshots/{seeded.newest}")
    assert "1 snapshot(s) behind" in row.text  # the DR store, from the DAG run's conf
    other = driver.find_element(By.CSS_SELECTOR, "#streams tr[data-stream='clicks'] .state")
    assert other.text == "stopped"


def test_the_history_shows_two_timelines_after_the_rollback_with_the_current_one_marked(site) -> None:
    from selenium.webdriver.common.by import By

    driver, server = site["driver"], site["server"]
    driver.get(server.url + "/streamstate/streams")
    ui_seed.wait_for(driver, f"#streams tr[data-stream='{ui_seed.STREAM}'] td a").click()
    ui_seed.wait_for(driver, "svg#history")
    assert driver.current_url == f"{server.url}/streamstate/streams/{ui_seed.STREAM}"
    lanes = driver.find_elements(By.CSS_SELECTOR, "g.timeline[data-timeline]")
    assert [(g.get_attribute("data-timeline"), g.get_attribute("data-current")) for g in lanes] == [
        ("1", "false"), ("2", "true")]
    assert lanes[1].text == "t2 (current)"
    assert len(driver.find_elements(By.CSS_SELECTOR, "svg#history a.snapshot")) == 8


def test_the_snapshot_whose_validation_failed_shows_it_as_failed(site) -> None:
    from selenium.webdriver.common.by import By

    driver, server, seeded = site["driver"], site["server"], site["seeded"]
    driver.get(f"{server.url}/streamstate/streams/{ui_seed.STREAM}")
    ui_seed.wait_for(driver, f"#snapshots tr[data-snapshot='{seeded.failed}'] a").click()
    failed = ui_seed.wait_for(driver, ".validation.failed")
    assert "FAILED" in failed.text
    assert "expect_column_values_to_not_be_null(key)" in failed.text
    assert "FAILED validation" in driver.find_element(By.TAG_NAME, "h1").text


def test_the_view_inside_airflows_ui_renders_the_streams_page(site) -> None:
    from selenium.webdriver.common.by import By

    driver, server = site["driver"], site["server"]
    driver.get(server.url + "/plugin/streams")
    frame = ui_seed.wait_for(driver, "iframe")
    assert frame.get_attribute("src").endswith("/streamstate/streams")
    driver.switch_to.frame(frame)
    try:
        row = ui_seed.wait_for(driver, f"#streams tr[data-stream='{ui_seed.STREAM}']")
        assert row.find_element(By.CSS_SELECTOR, ".state").text == "running"
    finally:
        driver.switch_to.default_content()
    # Airflow's UI mirrors the frame's page in the address bar (/plugin/<route> + its path):
    # one `streamstate` segment, not two.
    from selenium.webdriver.support.ui import WebDriverWait

    WebDriverWait(driver, 30).until(lambda d: d.current_url != server.url + "/plugin/streams")
    assert driver.current_url == server.url + "/plugin/streams/streamstate/streams"
