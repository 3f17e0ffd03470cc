"""Redraw nbs/images/view_world.png: the view notebook's world MERU model (world-debug, 150 steps on 512 scenes),
`hierbench view --world --static`, HyperView's static bundle opened in headless Chromium. Needs the [view] extra and
Debian's chromium. Usage: python tools/view_screenshot.py [OUT.png]"""

import functools
import http.server
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
from hierbench.cli.parser import main
from hierbench.recipes.recipe_run import train_recipe
from hierbench.data.sources import WorldData

ROOT = Path(__file__).resolve().parents[1]


def screenshot(bundle: Path, png: Path):
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(bundle))
    handler.log_message = lambda *a: None
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        with tempfile.TemporaryDirectory() as profile:
            subprocess.run(
                [
                    shutil.which("chromium"),
                    "--headless",
                    "--no-sandbox",
                    "--disable-gpu",
                    "--disable-background-networking",
                    f"--user-data-dir={profile}",
                    "--window-size=1400,760",
                    "--virtual-time-budget=20000",
                    f"--screenshot={png}",
                    f"http://127.0.0.1:{srv.server_address[1]}/",
                ],
                check=True,
                capture_output=True,
                timeout=180,
            )
    finally:
        srv.shutdown()


if __name__ == "__main__":
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "nbs" / "images" / "view_world.png"
    with tempfile.TemporaryDirectory() as d:
        d = Path(d)
        train_recipe(
            "meru",
            d / "run",
            WorldData(n_train=512, cache_dir=False),
            arch="world-debug",
            steps=150,
            batch_size=32,
            log=lambda *a: None,
        )
        main(
            [
                "view",
                "--scorer",
                f"hierbench:{d / 'run'}",
                "--world",
                "--n-world",
                "60",
                "--world-splits",
                "test-iid",
                "--out",
                str(d / "ws"),
                "--static",
                str(d / "bundle"),
            ]
        )
        screenshot(d / "bundle", out)
    print(f"wrote {out}")
