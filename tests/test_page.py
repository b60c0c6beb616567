"""The chat page at `/` of `spec-cli serve`, in a real browser: Debian's
chromium and chromium-driver driven by selenium, against a real server
(SmolLM2 drafting for itself, an API key set).  Skips, saying why, where
no browser is installed (.ci/run installs one)."""

import os
import shutil
import time
from pathlib import Path

import pytest

from test_serve import KEY, Server

CHROMIUM = next((p for p in ("/usr/bin/chromium", "/usr/bin/chromium-browser") if os.path.exists(p)), None)
DRIVER = shutil.which("chromedriver") or next((p for p in ("/usr/bin/chromedriver",) if os.path.exists(p)), None)


@pytest.fixture(scope="module")
def browser():
    if CHROMIUM is None or DRIVER is None:
        pytest.skip("no chromium/chromedriver here (Debian: apt-get install chromium chromium-driver)")
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed (pip install selenium)")
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1280,860",
                "--disable-gpu"):
        opts.add_argument(arg)
    driver = webdriver.Chrome(service=Service(DRIVER), options=opts)
    yield driver
    driver.quit()


@pytest.fixture(scope="module")
def keyed(smollm_path):
    # drafts of a fixed length, so that drafted text surely shows (the model drafts for itself)
    srv = Server(smollm_path, dict(os.environ), "--api-key", KEY, "--proposer", "draft", "--fixed-draft",
                 "--draft-max", "4")
    yield srv
    srv.stop()


def _shots() -> Path:
    out = Path(os.environ.get("SPEC_CLI_SCREENSHOTS") or os.environ.get("TMPDIR", "/tmp")) / "spec-cli-page"
    out.mkdir(parents=True, exist_ok=True)
    return out


def test_the_page_streams_an_answer_with_its_drafted_spans_and_stats(browser, keyed):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    wait = WebDriverWait(browser, 120, poll_frequency=0.05)
    browser.get(keyed.url + "/")
    # no key yet: the models call is refused, and the page says so and asks for one
    wait.until(lambda d: d.find_element(By.ID, "error").is_displayed())
    assert "401" in browser.find_element(By.ID, "error").text
    assert browser.find_element(By.ID, "keybox").is_displayed()
    browser.find_element(By.ID, "key").send_keys(KEY)
    browser.find_element(By.ID, "savekey").click()
    wait.until(lambda d: "proposer" in d.find_element(By.ID, "model").text)
    assert not browser.find_element(By.ID, "error").is_displayed()

    browser.find_element(By.ID, "max_tokens").clear()
    browser.find_element(By.ID, "max_tokens").send_keys("160")
    browser.find_element(By.ID, "prompt").send_keys("Write a Python function that adds two numbers, with a docstring.")
    t0 = time.perf_counter()
    browser.find_element(By.ID, "send").click()
    wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, ".msg.assistant span.d"))
    browser.save_screenshot(str(_shots() / "page-mid-stream.png"))
    wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, ".msg.assistant .stats"))
    browser.save_screenshot(str(_shots() / "page-finished.png"))
    took = time.perf_counter() - t0

    spans = browser.find_elements(By.CSS_SELECTOR, ".msg.assistant > span.d, .msg.assistant > span.t")
    drafted = [s for s in spans if "d" in s.get_attribute("class").split()]
    assert drafted and len(drafted) < len(spans)  # drafted text and the target's own, apart
    text = browser.execute_script(
        "return Array.from(document.querySelectorAll('.msg.assistant > span')).map(s => s.textContent).join('')")
    state = browser.execute_script("return {text: window.specCli.lastText, spec: window.specCli.last}")
    assert text == state["text"] and text.strip()
    spec = state["spec"]  # the response's `speculation` block, as the stream's last chunk carried it
    stats = browser.find_element(By.CSS_SELECTOR, ".msg.assistant .stats")
    assert int(stats.get_attribute("data-drafted")) == spec["drafted"] > 0
    assert int(stats.get_attribute("data-accepted")) == spec["accepted"]
    assert float(stats.get_attribute("data-acceptance")) == spec["acceptance"]
    assert float(stats.get_attribute("data-mean-accepted")) == spec["mean_accepted"]
    shown = stats.text
    assert f"({spec['accepted']}/{spec['drafted']})" in shown and "tok/s" in shown and "by position" in shown
    assert len(stats.find_elements(By.CSS_SELECTOR, ".bars i")) == len(spec["per_position"])
    print(f"browser test: answer streamed and shown in {took:.1f} s")


def test_the_page_says_when_the_server_is_gone(browser, smollm_path):
    """A dropped connection shows as an error, not as a silent stop."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    srv = Server(smollm_path, dict(os.environ))
    try:
        browser.get(srv.url + "/")
        WebDriverWait(browser, 60).until(lambda d: "proposer" in d.find_element(By.ID, "model").text)
    finally:
        srv.stop()
    browser.find_element(By.ID, "prompt").send_keys("Hello?")
    browser.find_element(By.ID, "send").click()
    WebDriverWait(browser, 60).until(lambda d: d.find_element(By.ID, "error").is_displayed())
    assert "connection dropped" in browser.find_element(By.ID, "error").text


def test_the_page_folds_a_reasoning_model_s_thinking_away(browser, smollm_path, tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    from test_thinking_serve import thinker_gguf

    srv = Server(thinker_gguf(smollm_path, tmp_path), dict(os.environ), "--reasoning-budget", "4", "--deterministic")
    try:
        wait = WebDriverWait(browser, 120, poll_frequency=0.05)
        browser.get(srv.url + "/")
        wait.until(lambda d: "proposer" in d.find_element(By.ID, "model").text)
        browser.find_element(By.ID, "prompt").send_keys("What is the capital of France?")
        browser.find_element(By.ID, "send").click()
        wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, ".msg.assistant .stats"))
        browser.save_screenshot(str(_shots() / "page-thinking.png"))
        fold = browser.find_element(By.CSS_SELECTOR, ".msg.assistant details.thinking")
        assert fold.get_attribute("open") is None  # folded until asked
        thought = browser.execute_script("return arguments[0].lastChild.textContent", fold)
        answer = browser.execute_script("return window.specCli.lastText")
        assert thought.strip() and answer.strip() and "think>" not in thought + answer
        shown = browser.execute_script(
            "return Array.from(document.querySelectorAll('.msg.assistant > span')).map(s => s.textContent).join('')")
        assert shown == answer  # the answer's text alone beside the fold
    finally:
        srv.stop()
