"""Headless Chromium for the tests of pages (VIZ, the WEBGPU export), driven over the DevTools protocol; a CI run without
chromium fails, elsewhere the test skips."""
import base64, fcntl, json, os, shutil, subprocess, time
from pathlib import Path
import pytest

def _above(fd: int, low: int) -> int:
  new = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, low)
  os.close(fd)
  return new

class Chromium:
  """Headless Chromium driven through the DevTools protocol on a pipe (--remote-debugging-pipe: JSON messages ending in
  a NUL byte, commands on fd 3, replies and events on fd 4): real mouse clicks, every request the page makes, screenshots."""
  def __init__(self, profile_dir: Path, flags: list[str]):
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
      if os.environ.get("CI"): pytest.fail("CI is set but no chromium is installed (see .ci/install-webgpu.sh)")
      pytest.skip("no chromium installed: apt-get install -y chromium")
    # both pipes above fd 10 (non-inheritable), so that putting their far ends on fds 3 and 4 in the child clobbers neither
    to_browser, self.cmd, self.out, from_browser = (_above(fd, 10) for fd in (*os.pipe(), *os.pipe()))
    # no background networking, component updates or sync: this machine's closed network refuses them, many at a time
    flags = ["--headless=new", "--no-sandbox", "--disable-background-networking", "--disable-component-update", "--disable-sync",
             "--no-first-run", "--remote-debugging-pipe", f"--user-data-dir={profile_dir}", *flags]
    # the far ends go to fds 3 and 4 of the child (dup2 makes them inheritable), where Chromium expects them
    self.proc = subprocess.Popen([browser, *flags, "about:blank"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, close_fds=False,
                                 preexec_fn=lambda: (os.dup2(to_browser, 3), os.dup2(from_browser, 4)))
    os.close(to_browser); os.close(from_browser)
    self.next_id, self.buf, self.events = 0, b"", []
    target = self.send("Target.createTarget", url="about:blank")["targetId"]
    self.session = self.send("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
    for domain in ("Page", "Network", "Runtime", "Log"): self.send(f"{domain}.enable", session=True)
  def _read(self, deadline: float) -> dict:
    while b"\0" not in self.buf:
      if time.time() > deadline: raise TimeoutError("chromium did not answer")
      chunk = os.read(self.out, 1 << 16)
      if not chunk: raise RuntimeError(f"chromium closed the pipe (exit code {self.proc.poll()})")
      self.buf += chunk
    msg, self.buf = self.buf.split(b"\0", 1)
    return json.loads(msg)
  def send(self, method: str, session: bool = False, timeout: float = 30, **params) -> dict:
    self.next_id += 1
    msg = {"id": self.next_id, "method": method, "params": params, **({"sessionId": self.session} if session else {})}
    os.write(self.cmd, json.dumps(msg).encode() + b"\0")
    deadline = time.time() + timeout
    while True:
      got = self._read(deadline)
      if got.get("id") == self.next_id:
        if "error" in got: raise RuntimeError(f"{method}: {got['error']}")
        return got["result"]
      self.events.append(got)
  def js(self, expr: str, timeout: float = 30):
    got = self.send("Runtime.evaluate", session=True, timeout=timeout, expression=expr, returnByValue=True, awaitPromise=True)
    if "exceptionDetails" in got: raise RuntimeError(f"{expr}: {got['exceptionDetails']}")
    return got["result"].get("value")
  def wait_for(self, expr: str, timeout: float = 30):
    deadline = time.time() + timeout
    while time.time() < deadline:
      if (v := self.js(expr)): return v
      time.sleep(0.1)
    raise TimeoutError(f"waited {timeout}s for {expr}")
  def click(self, selector: str) -> None:
    """A real click: the mouse pressed and released over the element's centre."""
    box = self.js(f"(() => {{ const e = document.querySelector({json.dumps(selector)}); e.scrollIntoView({{block: 'center'}}); "
                  f"const r = e.getBoundingClientRect(); return [r.x + r.width / 2, r.y + r.height / 2]; }})()")
    for kind in ("mousePressed", "mouseReleased"):
      self.send("Input.dispatchMouseEvent", session=True, type=kind, x=box[0], y=box[1], button="left", clickCount=1)
  def mouse(self, kind: str, x: float, y: float, **params) -> None:
    """A mouse event at (x, y): mousePressed/mouseReleased/mouseMoved (button=...), or mouseWheel (deltaX, deltaY)."""
    self.send("Input.dispatchMouseEvent", session=True, type=kind, x=x, y=y, **params)
  def key(self, key: str) -> None:
    """A key pressed and released: a printable character, or a key name like ArrowDown."""
    text = {"text": key} if len(key) == 1 else {}
    for kind in ("keyDown", "keyUp"): self.send("Input.dispatchKeyEvent", session=True, type=kind, key=key, **(text if kind == "keyDown" else {}))
  def errors(self) -> list[str]:
    """What the page reported as errors so far: uncaught exceptions, console.error calls, failed loads (a 404 too)."""
    out = []
    for e in self.events:
      m, p = e.get("method"), e.get("params", {})
      if m == "Runtime.exceptionThrown": out.append(p["exceptionDetails"].get("exception", {}).get("description") or p["exceptionDetails"]["text"])
      elif m == "Runtime.consoleAPICalled" and p["type"] == "error": out.append(" ".join(str(a.get("value", a.get("description"))) for a in p["args"]))
      elif m == "Log.entryAdded" and p["entry"]["level"] == "error": out.append(f"{p['entry']['text']} {p['entry'].get('url', '')}")
    return out
  def screenshot(self, path: Path) -> None:
    path.write_bytes(base64.b64decode(self.send("Page.captureScreenshot", session=True, format="png")["data"]))
  def requested_urls(self) -> list[str]:
    return [e["params"]["request"]["url"] for e in self.events if e.get("method") == "Network.requestWillBeSent"]
  def close(self) -> None:
    self.proc.kill(); self.proc.wait()
    os.close(self.cmd); os.close(self.out)
