"""Headless Chromium as the tests' browser: lay a page out and read back what a small measuring script found.

The report has no scripts; the probe goes into a copy of the page only.  The tests that use this skip, saying why,
without Debian's ``/usr/bin/chromium`` (``.ci/run`` installs it when it runs as root).
"""

from __future__ import annotations

import html
import json
import pathlib
import re
import subprocess
from typing import Any

import pytest

CHROMIUM = pathlib.Path("/usr/bin/chromium")
needs_chromium = pytest.mark.skipif(not CHROMIUM.exists(), reason="Debian's chromium is not installed (apt-get install "
                                                                  "chromium; .ci/run installs it when it runs as root)")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync", "--hide-scrollbars"]


def chromium_shows(page: pathlib.Path, tmp_path: pathlib.Path, probe: str, width: int = 1400) -> Any:
    """Lay the page out in headless Chromium at ``width`` px and return the JSON that ``probe`` (a ``<script>``
    writing it into ``<pre id="probe">``) measured."""
    probed = tmp_path / "probed.html"
    probed.write_text(page.read_text(encoding="utf-8").replace("</body>", probe + "</body>"), encoding="utf-8")
    done = subprocess.run([str(CHROMIUM), *FLAGS, f"--user-data-dir={tmp_path / 'profile'}",
                           f"--window-size={width},1000", "--dump-dom", probed.as_uri()],
                          capture_output=True, text=True, timeout=120, check=True)
    found = re.search(r'<pre id="probe">(.*?)</pre>', done.stdout, flags=re.S)
    assert found, f"Chromium's DOM has no probe output; stderr: {done.stderr[-2000:]}"
    return json.loads(html.unescape(found.group(1)))
