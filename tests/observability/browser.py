"""A real headless Chromium (Debian's chromium and chromium-driver), driven by Selenium."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager

from selenium import webdriver
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service

CHROMIUM_HINT = "chromium/chromedriver not found: run make setup (Debian: chromium chromium-driver)"
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--window-size=1200,800",
)


@contextmanager
def chromium() -> Iterator[webdriver.Chrome]:
    binary, driver_path = shutil.which("chromium"), shutil.which("chromedriver")
    assert binary is not None and driver_path is not None, CHROMIUM_HINT
    options = Options()
    options.binary_location = binary
    for flag in FLAGS:
        options.add_argument(flag)
    driver = webdriver.Chrome(options=options, service=Service(executable_path=driver_path))
    try:
        yield driver
    finally:
        driver.quit()
