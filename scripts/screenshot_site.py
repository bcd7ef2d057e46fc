"""Screenshots of the built documentation site in a headless browser: its front page and one
API page, as PNG files.

Usage: python scripts/screenshot_site.py SITE_DIR OUT_DIR

It uses the first of ``chromium``, ``chromium-browser``, ``google-chrome`` on PATH (Debian:
``apt-get install chromium``) and exits with status 3, writing nothing, when there is none.
Each picture is a 1280 x 1600 window of the page as a reader sees it on opening it.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

#: the pages shot: (page of the site, picture's name)
PAGES = (("index.html", "front-page.png"), ("api/units.html", "api-units.png"))
BROWSERS = ("chromium", "chromium-browser", "google-chrome")
WINDOW = (1280, 1600)
NO_BROWSER = 3


def browser() -> str | None:
    """The headless browser on PATH, or None."""
    return next((found for name in BROWSERS if (found := shutil.which(name))), None)


def shoot(exe: str, page: Path, png: Path, timeout: float = 120.0) -> None:
    """One screenshot of ``page`` (a local HTML file) into ``png``."""
    with tempfile.TemporaryDirectory(prefix="ctrlrnn-chromium-") as profile:
        cmd = [exe, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
               "--disable-dev-shm-usage", "--no-first-run", f"--user-data-dir={profile}",
               f"--window-size={WINDOW[0]},{WINDOW[1]}", f"--screenshot={png}",
               page.resolve().as_uri()]
        run = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if run.returncode != 0 or not png.is_file() or png.stat().st_size == 0:
        raise RuntimeError(f"{exe} made no screenshot of {page} (exit {run.returncode}): "
                           f"{run.stderr.strip()[-500:]}")


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    site, out = Path(argv[0]), Path(argv[1])
    exe = browser()
    if exe is None:
        print(f"[docs] no headless browser on PATH ({', '.join(BROWSERS)}): no screenshots "
              "(Debian: apt-get install chromium)")
        return NO_BROWSER
    out.mkdir(parents=True, exist_ok=True)
    for page, name in PAGES:
        if not (site / page).is_file():
            print(f"[docs] {site / page} is missing: build the site first", file=sys.stderr)
            return 1
        shoot(exe, site / page, out / name)
        print(f"[docs] screenshot of {page}: {out / name}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
