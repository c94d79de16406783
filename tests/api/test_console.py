"""The web console in a real browser (Debian's chromium, driven by Selenium): an operator
opens a running session, watches it progress, decides its pending calls, sees it finish."""

from __future__ import annotations

import io
import os
import shutil
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from selenium import webdriver
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support import expected_conditions as seen
from selenium.webdriver.support.ui import WebDriverWait

from brainhands.api.keys import revoke_key
from tests.helpers.agent_run import AgentRun, agent_run
from tests.helpers.api import key_for, start_api
from tests.helpers.brains import BrainHarness
from tests.helpers.polling import eventually

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]
__all__ = ["agent_run"]  # the fixture

CHROMIUM, DRIVER = shutil.which("chromium"), shutil.which("chromedriver")
SCREENSHOTS = os.environ.get("BRAINHANDS_SCREENSHOTS")
"""A folder to keep the pages' screenshots in (``docs/`` when they are retaken)."""


@pytest.fixture
def browser() -> Iterator[WebDriver]:
    if not (CHROMIUM and DRIVER):
        message = (
            "chromium and chromedriver are not installed (apt install chromium chromium-driver)"
        )
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    options = Options()
    options.binary_location = CHROMIUM
    for argument in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--window-size=1280,900",
    ):
        options.add_argument(argument)
    driver = webdriver.Chrome(service=Service(DRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()


def shoot(driver: WebDriver, tmp_path: Path, name: str) -> None:
    driver.save_screenshot(str(tmp_path / name))
    if SCREENSHOTS:
        shutil.copy(tmp_path / name, Path(SCREENSHOTS) / name)


async def test_an_operator_watches_a_session_approves_and_denies_and_sees_it_finish(
    agent_run: AgentRun, browser: WebDriver, tmp_path: Path
) -> None:
    brains = agent_run.brains
    agent_run.start_brain()
    agent_run.start_hands()
    api = await start_api(brains)
    key = await key_for(brains, "acme", "read", "submit", "tasks", "approve")
    wait = WebDriverWait(browser, 60)

    browser.get(f"{api.url}/console")
    browser.find_element(By.ID, "key").send_keys(key)
    browser.find_element(By.CSS_SELECTOR, "#login button").click()
    wait.until(seen.text_to_be_present_in_element((By.ID, "live"), "live"))
    async with api.http(key) as http:
        made = await http.post(
            "/sessions/s1/submissions",
            json={"text": "please do the errand", "agent": "guarded", "request_id": "r1"},
        )
        assert made.status_code == 200, made.text
        # The session's files, as its workspace's first version: shown with the session.
        tarball = io.BytesIO()
        with tarfile.open(fileobj=tarball, mode="w:gz") as archive:
            info = tarfile.TarInfo("notes/plan.md")
            info.size = 5
            archive.addfile(info, io.BytesIO(b"plan\n"))
        given = await http.put("/sessions/s1/workspaces/repo", content=tarball.getvalue())
        assert given.status_code == 201, given.text
    # The list is live: the new session appears, and then that it needs action.
    row = (By.CSS_SELECTOR, "tr[data-session='s1']")
    wait.until(seen.text_to_be_present_in_element(row, "needs action"))
    shoot(browser, tmp_path, "console-sessions.png")

    browser.find_element(By.LINK_TEXT, "s1").click()
    wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "button.approve")) == 2)
    assert "NEEDS ACTION" in browser.find_element(By.ID, "status").text
    shoot(browser, tmp_path, "console-session.png")
    rows = browser.find_elements(By.CSS_SELECTOR, "#approvals tr")
    by_recipient = {r.find_element(By.TAG_NAME, "code").text: r for r in rows}
    ana = next(r for text, r in by_recipient.items() if "ana@example.com" in text)
    bo = next(r for text, r in by_recipient.items() if "bo@example.com" in text)
    ana_id, bo_id = ana.get_attribute("data-approval"), bo.get_attribute("data-approval")
    browser.find_element(By.ID, f"approve-{ana_id}").click()
    # Decided, the call leaves the list at the next event; the other one stays.
    wait.until(lambda d: not d.find_elements(By.ID, f"approve-{ana_id}"))
    browser.find_element(By.ID, f"reason-{bo_id}").send_keys("bo is on leave")
    browser.find_element(By.ID, f"deny-{bo_id}").click()

    wait.until(seen.text_to_be_present_in_element((By.ID, "status"), "r1: answered"))
    entries = browser.find_element(By.ID, "entries").text
    assert "send_safe: succeeded" in entries and "send_safe: denied" in entries
    assert "agent.session — terminal (succeeded)" in browser.find_element(By.ID, "tasks").text
    [call] = browser.find_elements(By.CSS_SELECTOR, "#operations tr")
    assert call.text.startswith("send_safe succeeded 1 0")
    assert not browser.find_elements(By.CSS_SELECTOR, "button.approve")
    workspace = (By.CSS_SELECTOR, "tr[data-workspace='repo@1']")
    wait.until(seen.text_to_be_present_in_element(workspace, "added notes/plan.md"))
    assert "repo 1 given by a client 1 files, 5 bytes" in browser.find_element(*workspace).text
    fetched = browser.execute_async_script(
        """const done = arguments[arguments.length - 1];
        const seen = window.fetch;
        window.fetch = (...a) => seen(...a).then((r) => { done([a[0], r.status]); return r; });
        document.getElementById("download-repo-1").click();"""
    )
    assert fetched == ["/sessions/s1/workspaces/repo/versions/1/tarball", 200]
    shoot(browser, tmp_path, "console-session-finished.png")
    ledger = await agent_run.email.ledger()
    assert [s["recipient"] for s in ledger["sends"]] == ["ana@example.com"]


OPEN_STREAM = """
const url = arguments[0], done = arguments[arguments.length - 1];
const stream = new EventSource(url);
stream.addEventListener("view", (e) => {
  stream.close();
  done({id: e.lastEventId, view: JSON.parse(e.data)});
});
stream.onerror = () => { stream.close(); done({error: true}); };
"""


async def test_a_plain_event_source_opens_a_stream_with_a_stream_token(
    agent_run: AgentRun, browser: WebDriver
) -> None:
    brains = agent_run.brains
    agent_run.start_brain(tasks="tests.helpers.kinds")
    api = await start_api(brains)
    key = await key_for(brains, "acme", "read", "submit", "tasks")
    async with api.http(key) as http:
        made = await http.post(
            "/sessions/s1/submissions", json={"input": {"kind": "steps", "input": {}}}
        )
        assert made.status_code == 200, made.text
        minted = await http.post("/stream-tokens", json={"session_id": "s1", "ttl": 60})
        assert minted.status_code == 200, minted.text
        token = minted.json()["token"]
        other = (await http.post("/stream-tokens", json={"session_id": "s2"})).json()["token"]
    browser.set_script_timeout(30)
    browser.get(f"{api.url}/console")  # a page of the API's own origin, under its CSP
    opened = browser.execute_async_script(OPEN_STREAM, f"/sessions/s1/events?token={token}")
    assert "error" not in opened, opened
    assert opened["view"]["session"]["id"] == "s1" and int(opened["id"]) >= 1
    # A token of another session, a forged one, and none at all open nothing.
    for url in (
        f"/sessions/s1/events?token={other}",
        f"/sessions/s1/events?token={token[:-2]}xx",
        "/sessions/s1/events",
    ):
        assert browser.execute_async_script(OPEN_STREAM, url) == {"error": True}, url
    async with api.http() as http:  # what the browser was told, read the same way
        refused = await http.get(f"/sessions/s1/events?token={other}")
        assert refused.status_code == 403 and "another session" in refused.json()["detail"]
        forged = await http.get(f"/sessions/s1/events?token={token[:-2]}xx")
        assert forged.status_code == 401
        # A token reads, nothing else.
        acting = await http.post(
            f"/sessions/s1/submissions?token={token}", json={"input": {"kind": "steps"}}
        )
        assert acting.status_code == 401

    # The token dies with its key.
    async def stream_status() -> int:
        async with (
            api.http() as http,
            http.stream("GET", f"/sessions/s1/events?token={token}") as response,
        ):
            return response.status_code

    assert await stream_status() == 200
    await revoke_key(brains.store, key.split("_")[1])

    async def refused_once_revoked() -> bool:
        return await stream_status() == 401

    await eventually(refused_once_revoked, within=15, what="the revoked key's token refused")


async def test_an_operator_pauses_resumes_and_deletes_a_schedule_from_the_console(
    brains: BrainHarness, browser: WebDriver
) -> None:
    api = await start_api(brains)
    key = await key_for(brains, "acme", "read", "submit", "tasks")
    async with api.http(key) as acme, api.http(await key_for(brains, "globex", "admin")) as other:
        nightly = {"id": "nightly", "kind": "report", "cron": "0 3 * * *", "timezone": "UTC"}
        assert (await acme.post("/schedules", json=nightly)).status_code == 201
        assert (await other.post("/schedules", json={**nightly, "id": "theirs"})).status_code == 201
    wait = WebDriverWait(browser, 60)
    browser.get(f"{api.url}/console")
    browser.find_element(By.ID, "key").send_keys(key)
    browser.find_element(By.CSS_SELECTOR, "#login button").click()
    row = (By.CSS_SELECTOR, "tr[data-schedule='nightly']")
    wait.until(seen.text_to_be_present_in_element(row, "0 3 * * * (UTC)"))
    assert "task report" in browser.find_element(*row).text
    assert not browser.find_elements(By.CSS_SELECTOR, "tr[data-schedule='theirs']")

    browser.find_element(By.ID, "pause-schedule-nightly").click()
    wait.until(lambda d: d.find_elements(By.ID, "resume-schedule-nightly"))
    assert (await brains.store.schedules.get("acme", "nightly")).state == "paused"
    browser.find_element(By.ID, "resume-schedule-nightly").click()
    wait.until(lambda d: d.find_elements(By.ID, "pause-schedule-nightly"))
    assert (await brains.store.schedules.get("acme", "nightly")).state == "active"
    browser.find_element(By.ID, "delete-schedule-nightly").click()
    wait.until(lambda d: not d.find_elements(*row))
    assert [s.id for s in await brains.store.schedules.all()] == ["theirs"]
