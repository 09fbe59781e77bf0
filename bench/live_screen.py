"""The screen the live-view benchmark watches, and the changes it makes to it at known times.

  page     a colourful page (the screenshot benchmark's kind) in a Chromium --app window,
           served from this process over loopback HTTP; it polls `/state` and runs its
           counter (a change every 50 ms) only while the state is "run", so the bench can make
           the whole screen still or busy without touching the browser
  marker   an X window of the bench's own (python-xlib, override-redirect, so no window
           manager places or decorates it) over the page; `paint` fills it with one colour and
           returns once the X server has done it (XSync), which is the change's time

Xvfb draws synchronously: once XSync returns, a grab of the root window shows the new colour.
"""

from __future__ import annotations

import hashlib
import http.server
import io
import os
import threading
import time
from pathlib import Path
from typing import Any

from PIL import Image

from tests.harness import ChromiumApp, Xvfb

WIDTH, HEIGHT = 1280, 800
# The marker: over the page's first row of cells, away from its counter (bottom right).
MARK_BOX = (40, 40, 200, 200)  # x0, y0, x1, y1
MARK_AT = ((MARK_BOX[0] + MARK_BOX[2]) // 2, (MARK_BOX[1] + MARK_BOX[3]) // 2)
# Far apart in RGB, so that a JPEG of one is never taken for another.
PALETTE = (
    (230, 30, 30),
    (30, 200, 60),
    (40, 80, 230),
    (240, 220, 40),
    (200, 40, 200),
    (30, 210, 210),
    (250, 250, 250),
    (20, 20, 20),
)
TOLERANCE = 48  # per channel, at the marker's centre, after a JPEG of quality 70
PAGE = """<!doctype html><html><head><meta charset="utf-8"><title>live view bench</title><style>
body{margin:0;height:100vh;font:28px sans-serif;color:#fff;
background:linear-gradient(135deg,#e63946 0%,#f4a261 25%,#2a9d8f 50%,#264653 75%,#8338ec 100%)}
.grid{display:grid;grid-template-columns:repeat(8,1fr);gap:12px;padding:24px}
.grid div{height:120px;border-radius:12px;display:flex;align-items:center;justify-content:center}
#tick{position:fixed;bottom:24px;right:32px;font:bold 48px monospace;color:#111;
background:#fffb;padding:8px 16px;border-radius:8px}
</style></head><body><div class="grid" id="g"></div><div id="tick">0</div><script>
const g=document.getElementById('g');
for(let i=0;i<32;i++){const d=document.createElement('div');
d.style.background='hsl('+(i*37%360)+',70%,'+(35+i%4*10)+'%)';d.textContent='cell '+i;
g.appendChild(d);}
let n=0,running=false;
setInterval(()=>{if(running)document.getElementById('tick').textContent=(++n)+' frames';},50);
async function poll(){try{const r=await fetch('/state',{cache:'no-store'});
running=(await r.text())==='run';}catch(e){}setTimeout(poll,100);}
poll();
</script></body></html>
"""


class PageServer:
    """The page and its state ("run" or "still") on a loopback port."""

    def __init__(self) -> None:
        self.state = "still"
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                body = (PAGE if self.path == "/" else server.state).encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/html" if self.path == "/" else "text/plain")
                self.send_header("Cache-Control", "no-store")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass  # twenty polls a second are not news

        self._http = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._http.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._http.server_address[1]}/"

    def start(self) -> PageServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._http.shutdown()
        self._http.server_close()


class Marker:
    """A window of one colour at MARK_BOX, painted from this process."""

    def __init__(self, xvfb: Xvfb) -> None:
        from Xlib import X, display  # type: ignore[import-untyped]

        self._x = X
        self._display = display.Display(xvfb.display)
        screen = self._display.screen()
        colormap = screen.default_colormap
        self._pixels = {
            rgb: colormap.alloc_color(rgb[0] * 257, rgb[1] * 257, rgb[2] * 257).pixel
            for rgb in PALETTE
        }
        x0, y0, x1, y1 = MARK_BOX
        self._window = screen.root.create_window(
            x0,
            y0,
            x1 - x0,
            y1 - y0,
            0,
            screen.root_depth,
            X.InputOutput,
            X.CopyFromParent,
            background_pixel=self._pixels[PALETTE[0]],
            override_redirect=True,
        )
        self._window.map()
        self._window.configure(stack_mode=X.Above)  # over the Chromium window mapped before
        self._display.sync()

    def paint(self, rgb: tuple[int, int, int]) -> tuple[float, float]:
        """Fill the window with `rgb`; (perf_counter, time.time()) taken just before asking,
        so that the latency measured from it is never shorter than the real one."""
        pixel = self._pixels[rgb]
        at, wall = time.perf_counter(), time.time()
        self._window.change_attributes(background_pixel=pixel)
        self._window.clear_area(0, 0, 0, 0)  # 0 x 0: the whole window
        self._display.sync()
        return at, wall

    def close(self) -> None:
        self._window.destroy()
        self._display.close()


class WatchedScreen:
    """The page and the marker on an Xvfb display, and checks of what it shows."""

    def __init__(self, xvfb: Xvfb, workdir: Path) -> None:
        self.xvfb = xvfb
        self.workdir = workdir
        self.page = PageServer()
        self.app: ChromiumApp | None = None
        self.marker: Marker | None = None
        self._mss: Any = None

    def start(self) -> str:
        """Shows the page and the marker over it; returns what is on the screen, for the report."""
        if not ChromiumApp.available():
            raise RuntimeError("chromium and xdotool are needed for the page the bench watches")
        os.environ.update(self.xvfb.env)  # Xlib and mss read DISPLAY and XAUTHORITY
        self.page.start()
        self.app = ChromiumApp(self.xvfb.env, self.page.url, self.workdir)
        self.app.start(WIDTH, HEIGHT)
        time.sleep(1.5)  # first paint
        self.marker = Marker(self.xvfb)
        import mss

        self._mss = mss.MSS()
        return (
            "chromium --app page: 32 coloured cells on a gradient, its counter every 50 ms while"
            f" busy; a {MARK_BOX[2] - MARK_BOX[0]} px square X window over it for the changes"
        )

    def set(self, state: str, timeout: float = 10.0) -> None:
        """Make the page `state` ("run" or "still"); returns once the screen is seen to do so."""
        self.page.state = state
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            first = self.digest()
            time.sleep(0.3)  # the page polls every 100 ms and ticks every 50 ms
            if (first == self.digest()) == (state == "still"):
                return
        raise RuntimeError(f"the page did not become {state} within {timeout:.0f} s")

    def digest(self) -> bytes:
        raw = self._mss.grab(self._mss.monitors[1])
        return hashlib.blake2b(raw.raw, digest_size=16).digest()

    def marker_shows(self, rgb: tuple[int, int, int]) -> bool:
        """Whether a grab in this process shows `rgb` at the marker: it is on top."""
        x, y = MARK_AT
        raw = self._mss.grab({"left": x, "top": y, "width": 1, "height": 1})
        return near(tuple(raw.pixel(0, 0)), rgb)

    def stop(self) -> None:
        if self._mss is not None:
            self._mss.close()
        if self.marker is not None:
            self.marker.close()
        if self.app is not None:
            self.app.stop()
        self.page.stop()


def near(seen: tuple[int, ...], rgb: tuple[int, int, int]) -> bool:
    return all(abs(a - b) <= TOLERANCE for a, b in zip(seen[:3], rgb, strict=True))


def frame_shows(data: bytes, width: int, rgb: tuple[int, int, int]) -> bool:
    """Whether a JPEG frame `width` pixels wide shows `rgb` at the marker's centre. Decoded at
    1/8 scale (JPEG's DCT scaling) for speed: the marker is still 20 pixels wide there."""
    image = Image.open(io.BytesIO(data))
    image.draft("RGB", (max(1, image.width // 8), max(1, image.height // 8)))
    scale = image.width / width
    x, y = int(MARK_AT[0] * scale), int(MARK_AT[1] * scale)
    pixel = image.convert("RGB").getpixel((x, y))
    assert isinstance(pixel, tuple)
    return near(pixel, rgb)
