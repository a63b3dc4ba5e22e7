"""The operators' dashboard, seen as a person sees it: the four stages run on a real broker, a
job runs to SUCCEEDED and another waits for a host, the dashboard is served in-process, and
headless Chromium (Debian's, driven through its own chromedriver) loads the page."""

from __future__ import annotations

import base64
import os
import shutil
from pathlib import Path

import pytest
from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException, TimeoutException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from peloton.auth.identities import Identities
from peloton.auth.tokens import issue
from pelotonctl.dashboard.gate import Gate
from pelotonctl.dashboard.server import Dashboard, start
from pelotonctl.dashboard.sources import Sources

pytestmark = pytest.mark.integration

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")

HELLO = """
name: dashboard-hello
instancecount: 4
defaultconfig:
  resource: {cpulimit: 1, memlimitmb: 64, disklimitmb: 10}
  command: {shell: true, value: 'exit 0'}
"""

# No host is called "nowhere": placement sends the task back, and the page must say why.
PINNED = """
name: dashboard-pinned
instancecount: 1
defaultconfig:
  resource: {cpulimit: 1, memlimitmb: 64}
  command: {shell: true, value: 'exit 0'}
  constraint:
    type: 1
    labelconstraint: {kind: 2, condition: 2, label: {key: hostname, value: nowhere}, requirement: 1}
"""


@pytest.fixture
def browser(tmp_path):
    missing = [str(p) for p in (CHROMIUM, CHROMEDRIVER) if not p.exists()]
    if missing:
        pytest.skip(f"{' and '.join(missing)} not installed (Debian packages chromium and chromium-driver; "
                    f"`make system` installs them)")
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--disable-background-networking", "--disable-component-update", "--disable-sync",
                "--no-first-run", "--window-size=1440,1000", f"--user-data-dir={tmp_path / 'chromium-profile'}"):
        options.add_argument(arg)
    # The driver given explicitly: selenium never looks for one to download.
    driver = webdriver.Chrome(options=options, service=Service(executable_path=str(CHROMEDRIVER)))
    yield driver
    driver.quit()


def seen(browser, css: str, check=lambda text: bool(text), timeout: float = 20) -> str:
    """The visible text of the element at `css` once `check` holds for it. The page draws itself
    again every two seconds, so an element found may be replaced before it is read: read again."""
    found: list[str] = []

    def ready(driver) -> bool:
        found[:] = [e.text for e in driver.find_elements(By.CSS_SELECTOR, css)]
        return any(check(text) for text in found)

    try:
        WebDriverWait(browser, timeout, ignored_exceptions=(StaleElementReferenceException,)).until(ready)
    except TimeoutException:
        raise AssertionError(f"{css}: never showed what was expected within {timeout}s; it showed {found}") from None
    return next(text for text in found if check(text))


def attribute(browser, css: str, name: str, timeout: float = 10) -> str:
    """An attribute of the element at `css`, read again when the page has just replaced it."""
    value: list[str] = []

    def ready(driver) -> bool:
        value[:] = [driver.find_element(By.CSS_SELECTOR, css).get_attribute(name)]
        return True

    WebDriverWait(browser, timeout, ignored_exceptions=(StaleElementReferenceException,)).until(ready)
    return value[0]


def test_the_dashboard_shows_stages_pools_jobs_hosts_and_why_tasks_wait(pipeline_factory, browser, tmp_path) -> None:
    p = pipeline_factory(hosts="sim:2:cpu=8,mem_mb=16384,disk_mb=100000", sim_task_seconds=0.1,
                         placement_attempts=2, placement_backoff_s=0.2)
    p.start_all()
    token, row = issue("ops", ["ops"], True, now_ms=1)
    p.store.add_token(row)
    with start(Dashboard(Sources(p.settings, p.store), sample_every_s=1.0), port=0,
               gate=Gate(Identities(p.store), p.store)) as running:
        browser.get(running.url)  # signed out: the sign-in form
        assert browser.title == "Peloton dashboard: sign in"
        browser.find_element(By.ID, "token").send_keys("plt_000000000000_" + "x" * 43)
        browser.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
        assert "not valid" in seen(browser, "#refused", lambda t: bool(t))
        browser.find_element(By.ID, "token").send_keys(token)
        browser.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
        WebDriverWait(browser, 10).until(lambda d: d.title == "Peloton dashboard")
        # Submitted while the page watches, so its charts show the job going through.
        done = p.submit(HELLO)
        pinned = p.submit(PINNED)
        assert p.wait_job(done) == "SUCCEEDED"

        # A card per stage, in pipeline order, each with its status word from the consumer lag.
        names = [seen(browser, f'[data-stage="{stage}"] h3') for stage in ("admit", "entitle", "place", "launch")]
        assert names == ["admit", "entitle", "place", "launch"]
        for stage in names:
            status = seen(browser, f'[data-stage="{stage}"] [data-field="status"]', lambda t: t != "no data")
            assert status in ("OK", "WARN", "ERR", "STALL", "STOP"), (stage, status)

        # The finished job's row: its state and every instance counted SUCCEEDED.
        row = f'tr[data-job-id="{done}"]'
        assert "dashboard-hello" in seen(browser, row)
        # (the page shows the last sample, taken each second: it may still say RUNNING a moment)
        assert seen(browser, f'{row} [data-field="state"]', lambda t: t == "SUCCEEDED") == "SUCCEEDED"
        assert seen(browser, f'{row} [data-state-count="SUCCEEDED"]', lambda t: t == "4") == "4"

        # The cluster's pool: its cpu entitlement drawn as a bar (two hosts of 8 cpu), the test
        # pool's bars beside it.
        seen(browser, '[data-pool="/"] h3')
        bar = '[data-pool="/"] svg.bar-chart[data-kind="cpu"] rect[data-measure="entitlement"]'
        assert float(attribute(browser, bar, "width")) > 0
        assert float(attribute(browser, bar, "data-value")) == 16
        memory = '[data-pool="/test"] svg.bar-chart[data-kind="memory"] rect[data-measure="entitlement"]'
        assert float(attribute(browser, memory, "width")) > 0

        # A host row per simulated host, with its room.
        # (the finished job's runs may still be on it in the sample shown: wait for the next)
        host = seen(browser, 'tr[data-host-id="sim-0"]', lambda t: "8 / 8" in t)
        assert "sim-0" in host and "UP" in host and "8 / 8" in host

        # Why the pinned job waits, in placement's words.
        why = seen(browser, f'[data-pending-job="{pinned}"]', lambda t: "fits on none of 2 hosts" in t, timeout=30)
        assert "dashboard-pinned" in why and "constraint hostname=nowhere" in why

        # A job's latest update or restart under its state: where it is, and why.
        restarted = p.ctl("job", "restart", pinned, "--start-paused")
        assert restarted.returncode == 0, restarted.stderr
        line = seen(browser, f'tr[data-job-id="{pinned}"] [data-field="update"]', lambda t: "PAUSED" in t)
        assert line.startswith("restart PAUSED 0/") and "started paused by" in line, line

        # Nothing the page read failed (the broker and the store both answered).
        WebDriverWait(browser, 10).until(lambda d: not d.find_elements(By.CSS_SELECTOR, "[data-error-for]:not(:empty)"))
        assert seen(browser, "#updated").startswith("updated")

        # The whole page in one picture, for a person to look at (beyond the window's height).
        width, height = browser.execute_script(
            "return [document.documentElement.scrollWidth, document.documentElement.scrollHeight]")
        shot = browser.execute_cdp_cmd("Page.captureScreenshot", {
            "format": "png", "captureBeyondViewport": True,
            "clip": {"x": 0, "y": 0, "width": width, "height": height, "scale": 1}})
        screenshot = tmp_path / "dashboard.png"
        screenshot.write_bytes(base64.b64decode(shot["data"]))
        if os.environ.get("PELOTON_TEST_OUTPUT"):
            out = Path(os.environ["PELOTON_TEST_OUTPUT"])
            out.mkdir(parents=True, exist_ok=True)
            shutil.copy(screenshot, out / "dashboard.png")


def test_the_dashboard_names_the_host_whose_agent_has_not_started_a_jobs_tasks(pipeline_factory, browser) -> None:
    """An agent that does not take its launches (frozen here; behind on its commands or cut off
    elsewhere): the host manager waits for it, and the page says on which host the job's tasks
    wait, until they start."""
    import signal

    p = pipeline_factory(hosts="agent:1:cpu=4,mem_mb=1024,disk_mb=1000", agent_timeout_s=60.0)
    p.start_all()
    frozen = p.procs["agent-0"]
    with start(Dashboard(Sources(p.settings, p.store), sample_every_s=1.0), port=0) as running:
        browser.get(running.url)
        WebDriverWait(browser, 10).until(lambda d: d.title == "Peloton dashboard")
        frozen.send_signal(signal.SIGSTOP)
        try:
            job = p.submit(HELLO.replace("instancecount: 4", "instancecount: 2"))
            why = seen(browser, f'[data-pending-job="{job}"] .not-started[data-host-id="agent-0"]',
                       lambda t: "not started" in t, timeout=40)
            assert why.startswith("instances 0, 1 · launched on agent-0") and "behind on its commands" in why, why
            assert "2 not started" in seen(browser, f'[data-pending-job="{job}"] .pending-head')
        finally:
            frozen.send_signal(signal.SIGCONT)
        assert p.wait_job(job, timeout=60) == "SUCCEEDED"
        WebDriverWait(browser, 10, ignored_exceptions=(StaleElementReferenceException,)).until(
            lambda d: not d.find_elements(By.CSS_SELECTOR, f'[data-pending-job="{job}"]'))
