"""VIZ: serves a local page (127.0.0.1 only, every asset shipped here) of the recorded rewrites, kernels and timeline."""
from __future__ import annotations
import functools, http.server, json, os, tempfile
from importlib import resources
from tinycore import trace
from tinycore.helpers import getenv

ASSETS = {"/": ("index.html", "text/html"), "/index.html": ("index.html", "text/html"), "/viz.js": ("viz.js", "text/javascript"),
          "/viz.css": ("viz.css", "text/css")}

def dump(capture: trace.Capture | None, profile: trace.Profile | None) -> dict:
  """What the page shows, as JSON-ready data: the capture's nodes and groups, and the profile's Chrome trace."""
  return {"format": "tinycore-viz", "version": 1, **(capture.to_json() if capture is not None else {"nodes": [], "groups": []}),
          "trace": profile.chrome_trace() if profile is not None else None}

def load(path: str | os.PathLike) -> dict:
  """A saved VIZ dump, or a profiler trace alone (Chrome trace-event JSON): then the page has the timeline only."""
  with open(path) as f: got = json.load(f)
  if isinstance(got, dict) and got.get("format") == "tinycore-viz": return got
  if isinstance(got, dict) and "traceEvents" in got: return {"format": "tinycore-viz", "version": 1, "nodes": [], "groups": [], "trace": got}
  raise ValueError(f"{path} is neither a VIZ dump nor a Chrome trace (a JSON object with traceEvents); save one with VIZ=1 or PROFILE=1")

class _Handler(http.server.BaseHTTPRequestHandler):
  def __init__(self, *args, payload: bytes, **kwargs):
    self.payload = payload
    super().__init__(*args, **kwargs)
  def do_GET(self):
    path = self.path.split("?")[0]
    if path == "/data.json": body, ctype = self.payload, "application/json"
    elif path in ASSETS: body, ctype = resources.files(__package__).joinpath(ASSETS[path][0]).read_bytes(), ASSETS[path][1]
    else:
      self.send_error(404, f"no {path} here")
      return
    self.send_response(200)
    self.send_header("Content-Type", ctype + "; charset=utf-8")
    self.send_header("Content-Length", str(len(body)))
    self.send_header("Cache-Control", "no-store")
    self.end_headers()
    self.wfile.write(body)
  def log_message(self, *args): pass

def server(data: dict, port: int = 0) -> http.server.ThreadingHTTPServer:
  """A server of the page and `data` on 127.0.0.1 (port 0: any free one); call serve_forever on it."""
  try: return http.server.ThreadingHTTPServer(("127.0.0.1", port), functools.partial(_Handler, payload=json.dumps(data).encode()))
  except OSError as e: raise OSError(f"VIZ cannot listen on 127.0.0.1:{port} ({e.strerror}); pick another port with VIZ_PORT=n") from e

def serve(data: dict, port: int) -> None:
  srv = server(data, port)
  print(f"VIZ: open http://127.0.0.1:{srv.server_address[1]}/ (Ctrl-C to stop)", flush=True)
  try: srv.serve_forever()
  except KeyboardInterrupt: pass
  finally: srv.server_close()

def serve_at_exit() -> None:
  """What VIZ=1 does when the program ends: save the run (reopen it with `python -m tinycore.viz PATH`) and serve it."""
  data = dump(trace.capture, trace.profiling)
  path = getenv("VIZ_PATH", os.path.join(tempfile.gettempdir(), "tinycore_viz.json"))
  with open(path, "w") as f: json.dump(data, f)
  print(f"VIZ: saved this run to {path}")
  serve(data, getenv("VIZ_PORT", 8000))
