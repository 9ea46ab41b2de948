"""VIZ: serves a local page (127.0.0.1 only, every asset shipped here) of the recorded rewrites, kernels and timeline."""
from __future__ import annotations
import base64, contextlib, functools, gc, http.server, json, os, tempfile
from typing import Iterator
from importlib import resources
import numpy as np
from tinycore import trace
from tinycore.helpers import getenv
from tinycore.runtime.device import Device

ASSETS = {"/": "index.html", "/index.html": "index.html", "/viz.js": "viz.js", "/graph.js": "graph.js", "/timeline.js": "timeline.js",
          "/viz.css": "viz.css", "/favicon.svg": "favicon.svg", "/favicon.ico": "favicon.svg"}
TYPES = {"html": "text/html; charset=utf-8", "js": "text/javascript; charset=utf-8", "css": "text/css; charset=utf-8",
         "svg": "image/svg+xml", "json": "application/json", "bin": "application/octet-stream", "txt": "text/plain; charset=utf-8"}

@contextlib.contextmanager
def paused_gc() -> Iterator[None]:
  """Building millions of small objects (a long run's events) triggers collections that each walk all of them: twice the
  time. None of them is garbage, so collection waits until the block is done."""
  was = gc.isenabled()
  gc.disable()
  try: yield
  finally:
    if was: gc.enable()

def dump(capture: trace.Capture | None, profile: trace.Profile | None) -> dict:
  """What the page shows, as JSON-ready data: the capture's nodes and groups, and the profile's Chrome trace."""
  return {"format": "tinycore-viz", "version": 2, **(capture.to_json() if capture is not None else {"nodes": [], "groups": []}),
          "trace": profile.chrome_trace() if profile is not None else None}

def load(path: str | os.PathLike) -> dict:
  """A saved VIZ dump, or a profiler trace alone (Chrome trace-event JSON): then the page has the timeline only."""
  try:
    with open(path, "rb") as f, paused_gc(): got = json.load(f)
  except (UnicodeDecodeError, json.JSONDecodeError) as e:
    raise ValueError(f"{path} is not JSON ({e}); VIZ reads what VIZ=1 saves (VIZ_PATH) or a Chrome trace from PROFILE=1") from None
  if isinstance(got, dict) and got.get("format") == "tinycore-viz":
    if got.get("version") == 1:   # version 1 kept the machine code as text (a hex dump where it was not text)
      for g in got["groups"]:
        if "binary" in g: g["binary"] = base64.b64encode(g["binary"].encode()).decode()
    return got
  if isinstance(got, dict) and isinstance(got.get("traceEvents"), list): return {"format": "tinycore-viz", "version": 2, "nodes": [], "groups": [], "trace": got}
  raise ValueError(f"{path} is neither a VIZ dump nor a Chrome trace (a JSON object with traceEvents); save one with VIZ=1 or PROFILE=1")

# ***** the timeline as columns: what the page draws a million spans from *****

def timeline(chrome: dict | None) -> tuple[dict, bytes, list[dict]]:
  """A Chrome trace's spans ("X" events) as typed columns: (meta, their bytes, the spans in column order).

  Tracks are (process, thread) pairs in their sort order; spans are sorted by track, then start, longest first. Columns,
  in this order in the bytes: start and length of each span (float64, microseconds from the first event), counter times
  and values (float64), each span's name (uint32 into meta["names"]), each flow arrow's first and last span (uint32).
  meta gives the counts, each track's [start, end) and each counter series' [start, end). A malformed event is a ValueError."""
  try:
    with paused_gc(): return _timeline((chrome or {}).get("traceEvents", []))
  except (KeyError, TypeError, AttributeError) as e:
    raise ValueError(f"the trace has an event without a field Chrome's trace format requires ({type(e).__name__}: {e})") from None

def _timeline(events: list[dict]) -> tuple[dict, bytes, list[dict]]:
  spans: list[dict] = []
  starts: list[dict] = []
  ends: list[dict] = []
  counts: list[dict] = []
  metas: list[dict] = []
  by = {"X": spans, "s": starts, "f": ends, "C": counts, "M": metas}
  for e in events:   # one pass over what may be millions of events
    if (got := by.get(e["ph"])) is not None: got.append(e)
  named = lambda what: {(e["pid"], e.get("tid")): e["args"] for e in metas if e["name"] == what}
  procs, threads = {p: a["name"] for (p, _), a in named("process_name").items()}, {k: a["name"] for k, a in named("thread_name").items()}
  psort, tsort = {p: a["sort_index"] for (p, _), a in named("process_sort_index").items()}, {k: a["sort_index"] for k, a in named("thread_sort_index").items()}
  floats = lambda evs, key: np.fromiter((e[key] for e in evs), np.float64, len(evs))
  keys = sorted({(e["pid"], e["tid"]) for e in spans}, key=lambda k: (psort.get(k[0], 0), str(k[0]), tsort.get(k, 0), str(k[1])))
  track_of = {k: i for i, k in enumerate(keys)}
  tracks = lambda evs: np.fromiter((track_of.get((e["pid"], e["tid"]), -1) for e in evs), np.int64, len(evs))
  track, ts, dur = tracks(spans), floats(spans, "ts"), np.maximum(floats(spans, "dur"), 0.0)
  starts = [e for e in starts if e.get("id") is not None]
  first_of = {e["id"]: i for i, e in enumerate(starts)}
  ends = [e for e in ends if e.get("id") in first_of]
  fts, its, cts = floats(starts, "ts"), floats(ends, "ts"), floats(counts, "ts")
  t0 = min((float(a.min()) for a in (ts, fts, its, cts) if len(a)), default=0.0)
  ts, fts, its, cts = ts - t0, fts - t0, its - t0, cts - t0
  names: dict[str, int] = {}
  name = np.fromiter((names.setdefault(str(e["name"]), len(names)) for e in spans), np.uint32, len(spans))
  order = np.lexsort((-dur, ts, track))
  track, ts, dur, name = track[order], ts[order], dur[order], name[order]
  bounds = np.searchsorted(track, np.arange(len(keys) + 1))
  # a flow's ends bind to the span on their track that starts last at or before them (Chrome's enclosing slice)
  def span_at(t: np.ndarray, at: np.ndarray) -> np.ndarray:
    out = np.full(len(t), -1, np.int64)
    for k in np.unique(t[t >= 0]):
      sel, lo, hi = t == k, bounds[k], bounds[k + 1]
      i = lo + np.searchsorted(ts[lo:hi], at[sel], side="right") - 1
      out[sel] = np.where(i >= lo, i, -1)
    return out
  first = np.fromiter((first_of[e["id"]] for e in ends), np.int64, len(ends))
  src, dst = span_at(tracks(starts), fts)[first], span_at(tracks(ends), its)
  keep = (src >= 0) & (dst >= 0)
  flow_src, flow_dst = src[keep].astype(np.uint32), dst[keep].astype(np.uint32)
  forder = np.argsort(ts[flow_src], kind="stable")
  flow_src, flow_dst = flow_src[forder], flow_dst[forder]
  # counters: a series per (process, counter name, argument), a step line; "bytes" is a memory graph
  series: dict[tuple, list[int]] = {}
  for i, e in enumerate(counts):
    for arg, v in e["args"].items():
      if isinstance(v, (int, float)): series.setdefault((e["pid"], e["name"], arg), []).append(i)
  cols, counters, at = [], [], 0
  for (pid, cname, arg), idx in series.items():
    t = cts[idx]
    v = np.fromiter((counts[i]["args"][arg] for i in idx), np.float64, len(idx))
    o = np.argsort(t, kind="stable")
    cols.append((t[o], v[o]))
    counters.append({"device": str(procs.get(pid, pid)), "name": cname if arg == "bytes" else f"{cname} {arg}", "bytes": arg == "bytes",
                     "start": at, "end": at + len(idx), "max": float(v.max())})
    at += len(idx)
  ctimes, cvals = (np.concatenate([c[k] for c in cols]) if cols else np.zeros(0) for k in (0, 1))
  end = max(float((ts + dur).max()) if len(ts) else 0.0, float(ctimes.max()) if len(ctimes) else 0.0)
  meta = {"spans": len(spans), "flows": len(flow_src), "counter_points": len(ctimes), "t0": t0, "end": end, "names": list(names),
          "tracks": [{"device": str(procs.get(p, p)), "queue": str(threads.get((p, t), t)), "start": int(bounds[i]), "end": int(bounds[i + 1])}
                     for i, (p, t) in enumerate(keys)], "counters": counters}
  body = b"".join(a.tobytes() for a in (ts, dur, ctimes, cvals, name, flow_src, flow_dst))
  return meta, body, [spans[i] for i in order]

# ***** machine code *****

def machine_code(group: dict) -> str:
  """A kernel's assembler output as the page shows it: text as it is (WGSL, OpenCL C), else the backend's disassembly,
  else a hex dump."""
  if "binary" not in group: return "(not recorded: the kernel was loaded before VIZ started recording)"
  binary = base64.b64decode(group["binary"])
  try: text = binary.decode()
  except UnicodeDecodeError: text = None
  if text is not None and all(c.isprintable() or c in "\n\t\r" for c in text): return text
  try:
    spec = Device.specs[group["backend"]]
    if (text := spec.assembler(Device.renderer(group["backend"])).disassemble(binary)) is not None: return text
    why = f"{group['backend']} has no disassembler here"
  except Exception as e: why = f"the {group.get('backend')} disassembler failed: {type(e).__name__}: {e}"
  head = binary[:8192]
  return (f"{len(binary)} bytes of machine code ({why}):\n" + "\n".join(f"{i:08x}  {head[i:i+16].hex(' ')}" for i in range(0, len(head), 16)) +
          ("\n..." if len(binary) > len(head) else ""))

# ***** the server *****

class _Handler(http.server.BaseHTTPRequestHandler):
  def __init__(self, *args, site: _Site, **kwargs):
    self.site = site
    super().__init__(*args, **kwargs)
  def do_GET(self):
    path = self.path.split("?")[0]
    try: body, kind = self.site.get(path)
    except (KeyError, ValueError, IndexError):
      self.send_error(404, f"no {path} here")
      return
    self.send_response(200)
    self.send_header("Content-Type", TYPES[kind])
    self.send_header("Content-Length", str(len(body)))
    self.send_header("Cache-Control", "no-store")
    self.end_headers()
    try: self.wfile.write(body)
    except (BrokenPipeError, ConnectionResetError): pass   # the page was closed or reloaded while this was on its way
  def log_message(self, *args): pass

class _Site:
  """What the server answers: the assets, data.json (the groups and the timeline's meta), timeline.bin (its columns),
  event/N (span N's own record) and binary/N (group N's machine code, disassembled when first asked for)."""
  def __init__(self, data: dict):
    meta, self.columns, self.spans = timeline(data.get("trace"))
    groups = [{k: v for k, v in g.items() if k != "binary"} for g in data.get("groups", [])]
    self.data = json.dumps({"nodes": data.get("nodes", []), "groups": groups, "timeline": meta}).encode()
    self.groups, self.codes = data.get("groups", []), {}
  def code(self, i: int) -> bytes:
    if i not in self.codes: self.codes[i] = machine_code(self.groups[i]).encode()
    return self.codes[i]
  def get(self, path: str) -> tuple[bytes, str]:
    if path in ASSETS: return resources.files(__package__).joinpath(ASSETS[path]).read_bytes(), ASSETS[path].rsplit(".", 1)[1]
    if path == "/data.json": return self.data, "json"
    if path == "/timeline.bin": return self.columns, "bin"
    kind, _, n = path[1:].partition("/")
    if kind == "event": return json.dumps(self.spans[int(n)], default=str).encode(), "json"
    if kind == "binary": return self.code(int(n)), "txt"
    raise KeyError(path)

def server(data: dict, port: int = 0) -> http.server.ThreadingHTTPServer:
  """A server of the page and `data` on 127.0.0.1 (port 0: any free one); call serve_forever on it."""
  site = _Site(data)
  try: return http.server.ThreadingHTTPServer(("127.0.0.1", port), functools.partial(_Handler, site=site))
  except OSError as e: raise OSError(f"VIZ cannot listen on 127.0.0.1:{port} ({e.strerror}); pick another port with VIZ_PORT=n") from e

def serve(data: dict, port: int) -> None:
  srv = server(data, port)
  print(f"VIZ: open http://127.0.0.1:{srv.server_address[1]}/ (Ctrl-C to stop)", flush=True)
  try: srv.serve_forever()
  except KeyboardInterrupt: pass
  finally: srv.server_close()

def serve_at_exit() -> None:
  """What VIZ=1 does when the program ends: save the run (reopen it with `python -m tinycore.viz PATH`) and serve it."""
  with paused_gc(): data = dump(trace.capture, trace.profiling)
  path = getenv("VIZ_PATH", os.path.join(tempfile.gettempdir(), "tinycore_viz.json"))
  with open(path, "w") as f: json.dump(data, f)
  print(f"VIZ: saved this run to {path}")
  serve(data, getenv("VIZ_PORT", 8000))
