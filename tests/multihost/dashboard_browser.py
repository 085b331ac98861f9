"""Drives the head's dashboard in headless Chromium like a person: a wrong token is refused,
the right one signs in, the nodes show, the job opens, and its world-size chart has the dip
and the recovery. Run on the head's host (inside its network namespace, where the dashboard
is reachable); prints one JSON line with what it saw, and saves a screenshot.

    dashboard_browser.py URL TOKEN JOB_ID SCREENSHOT [--nodes N] [--timeout S]

Chromium does not know the cluster's CA: the certificate is accepted as is here (the test
checks the CA with curl and the C++ client; a person imports <session>/tls/ca.pem)."""

import argparse
import json
import sys
import time

from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait


def main():
    p = argparse.ArgumentParser()
    p.add_argument("url")
    p.add_argument("token")
    p.add_argument("job_id")
    p.add_argument("screenshot")
    p.add_argument("--nodes", type=int, default=2)
    p.add_argument("--timeout", type=float, default=30)
    a = p.parse_args()

    options = Options()
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1400,1300"):
        options.add_argument(arg)
    options.set_capability("acceptInsecureCerts", True)
    driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)
    seen = {}
    try:
        driver.set_page_load_timeout(a.timeout)
        driver.set_script_timeout(a.timeout)
        # The page re-renders its tables at every poll: an element found a moment ago may be
        # gone by the time it is read, and the wait looks again (within its bound).
        wait = WebDriverWait(driver, a.timeout,
                             ignored_exceptions=(StaleElementReferenceException,))

        # Not signed in: the login page. A wrong token first.
        driver.get(a.url + "/")
        wait.until(lambda d: d.find_elements(By.ID, "token"))
        driver.find_element(By.ID, "token").send_keys("not-the-token")
        driver.find_element(By.ID, "login").click()
        wait.until(lambda d: d.find_elements(By.ID, "login-error") and
                   d.find_element(By.ID, "login-error").is_displayed())
        seen["wrong_token_refused"] = True
        seen["after_wrong_token_url"] = driver.current_url

        # The right one.
        box = driver.find_element(By.ID, "token")
        box.clear()
        box.send_keys(a.token)
        driver.find_element(By.ID, "login").click()
        wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "tr.node-row")) >= a.nodes)
        seen["nodes"] = [r.text for r in driver.find_elements(By.CSS_SELECTOR, "tr.node-row")]

        # Open the job from the jobs table.
        wait.until(lambda d: d.find_element(
            By.CSS_SELECTOR, f'a.job-link[data-job-id="{a.job_id}"]').click() or True)
        wait.until(lambda d: d.find_element(By.ID, "job-detail").is_displayed())
        wait.until(lambda d: d.execute_script(
            "const c = Chart.getChart('world-chart');"
            "return c && c.data.datasets[0].data.length > 0;"))
        wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "tr.recovery-row"))
        # Let one more poll land, then read what the page shows.
        time.sleep(1.5)
        seen["world_sizes"] = driver.execute_script(
            "return Chart.getChart('world-chart').data.datasets[0].data.map(p => p.y);")
        seen["markers"] = driver.execute_script(
            "const d = Chart.getChart('world-chart').data.datasets;"
            "return d.length > 1 ? d[1].data.length : 0;")
        seen["recoveries"] = [r.text for r in
                              driver.find_elements(By.CSS_SELECTOR, "tr.recovery-row")]
        seen["job_title"] = driver.find_element(By.ID, "job-title").text
        # The whole page in one picture (nodes, jobs, actors and the job), for the README.
        height = driver.execute_script("return document.documentElement.scrollHeight;")
        driver.set_window_size(1400, min(max(int(height) + 40, 900), 3200))
        driver.execute_script("window.scrollTo(0, 0);")
        time.sleep(0.5)
        driver.save_screenshot(a.screenshot)
        seen["screenshot"] = a.screenshot
    finally:
        driver.quit()
    print(json.dumps(seen))
    return 0


if __name__ == "__main__":
    sys.exit(main())
