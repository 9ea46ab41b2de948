"""The REMOTE server: an installed backend (every instance of it) behind HTTP, a session per client, safe against hostile requests.

Anyone holding the token can run kernels on this machine (kernels are code), so the server binds to 127.0.0.1 unless told
otherwise and refuses every request without the token. What it guards against is everything else: malformed, truncated,
oversized or unknown requests, ids that do not exist, allocations past its limits. Each gets an error reply and the
server keeps serving."""
from __future__ import annotations
import hmac, json, threading, time
from collections import OrderedDict
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from tinycore.dtype import dtypes
from tinycore.renderer import ProgramSpec
from tinycore.runtime.device import Device, Buffer
from tinycore.runtime.plugin import instance_name
from tinycore.runtime.runner import assemble
from tinycore.engine import copy
from tinygrad_remote.wire import VERSION, WireError, decode_batch, encode_reply

@dataclass
class Limits:
  max_request_bytes: int = 1 << 30      # one batch, uploads included
  max_alloc_bytes: int = 1 << 34        # one buffer
  max_buffers: int = 1 << 20            # live buffers per session
  max_instances: int = 64               # instance indices a client may open when the backend has virtual instances
  blob_cache_bytes: int = 256 << 20     # uploads kept per session for reuse by hash (least recently used go first)
  session_timeout_s: float = 900.0      # a session idle this long is closed and its buffers freed
  read_timeout_s: float = 60.0          # a client that stops sending mid-request is cut off after this

class RequestFailed(Exception):
  """A well-formed request that cannot be done (unknown id, too large, a backend error): reported, the server goes on."""

class Session:
  """One client's buffers, programs and uploaded blobs."""
  def __init__(self):
    self.bufs: dict[int, Buffer] = {}
    self.views: dict[int, dict[tuple[int, int], Buffer]] = {}   # buffer id -> (offset, size) -> view, dropped with the buffer
    self.progs: dict[int, tuple[str, Any, int]] = {}   # id -> (device, loaded program, number of integer variables)
    self.blobs: OrderedDict[str, bytes] = OrderedDict()
    self.blob_bytes, self.last_seen = 0, time.monotonic()
  def keep_blob(self, key: str, data: bytes, cap: int) -> None:
    if key in self.blobs: self.blobs.move_to_end(key); return
    self.blobs[key] = data
    self.blob_bytes += len(data)
    while self.blob_bytes > cap and len(self.blobs) > 1:
      self.blob_bytes -= len(self.blobs.popitem(last=False)[1])

class RemoteServer:
  """Runs batches against `backend`'s instances. Batches run one at a time (devices are not assumed thread-safe)."""
  def __init__(self, backend: str, token: str, limits: Limits | None = None):
    self.backend, self.token, self.limits = Device.canonicalize(backend), token, limits or Limits()
    self.spec = Device.specs.get(self.backend)
    if self.spec is None: raise SystemExit(f"tinygrad-remote: no backend {backend!r} here; installed: {sorted(Device.specs)}")
    Device[self.backend]  # open instance 0 now: a server that cannot reach its device should not start
    self.sessions: dict[str, Session] = {}
    self.lock = threading.Lock()

  def info(self) -> dict:
    n = self.spec.instances()
    return {"wire": VERSION, "backend": self.backend, "package": self.spec.package, "version": self.spec.version,
            "instances": self.limits.max_instances if n is None else n, "capabilities": _jsonable(self.spec.capabilities),
            "max_alloc_bytes": self.limits.max_alloc_bytes, "max_request_bytes": self.limits.max_request_bytes,
            "supports_offset": Device[self.backend].allocator.supports_offset}

  def expire_sessions(self) -> None:
    with self.lock:
      now = time.monotonic()
      for sid in [s for s, v in self.sessions.items() if now - v.last_seen > self.limits.session_timeout_s]: del self.sessions[sid]

  def run_batch(self, body: bytes) -> bytes:
    """Decode, run in order, reply. A request that fails stops the batch: the reply says which, the ones before it ran."""
    try: sid, requests, uploads = decode_batch(body)
    except WireError as e: return encode_reply([], [], f"bad request: {e}", 0)
    results: list[Any] = []
    blobs: list[bytes] = []
    with self.lock:
      sess = self.sessions.get(sid)
      if sess is None: sess = self.sessions[sid] = Session()
      sess.last_seen = time.monotonic()
      for key, data in uploads.items(): sess.keep_blob(key, bytes(data), self.limits.blob_cache_bytes)
      for i, (op, f) in enumerate(requests):
        try: results.append(getattr(self, f"_{op}")(sess, sid, f, blobs))
        except (RequestFailed, MemoryError) as e: return encode_reply(results, blobs, f"{op}: {e}", i)
        except Exception as e: return encode_reply(results, blobs, f"{op}: {self.backend} raised {type(e).__name__}: {e}", i)
    return encode_reply(results, blobs)

  # ***** one method per request op (wire.REQUESTS): fields are already type-checked *****
  def _device(self, index: int) -> str:
    n = self.spec.instances()
    limit = self.limits.max_instances if n is None else n
    if index >= limit: raise RequestFailed(f"instance {index} does not exist: the server's {self.backend} has {limit}")
    return instance_name(self.backend, index)
  def _buf(self, sess: Session, ref: list[int]) -> Buffer:
    i, offset, size = ref
    if (b := sess.bufs.get(i)) is None: raise RequestFailed(f"no buffer {i} in this session")
    if offset == 0 and size == b.nbytes: return b
    if offset + size > b.nbytes: raise RequestFailed(f"view [{offset}, +{size}) is outside buffer {i} of {b.nbytes} bytes")
    views = sess.views.setdefault(i, {})
    if (v := views.get((offset, size))) is None: v = views[(offset, size)] = b.view(size, dtypes.uint8, offset).ensure_allocated()
    return v
  def _blob(self, sess: Session, key: str) -> bytes:
    if (data := sess.blobs.get(key)) is None: raise RequestFailed(f"missing blob {key}")
    sess.blobs.move_to_end(key)
    return data
  def _new_id(self, table: dict, i: int, what: str) -> None:
    if i in table: raise RequestFailed(f"{what} {i} already exists in this session")
    if len(table) >= self.limits.max_buffers: raise RequestFailed(f"more than {self.limits.max_buffers} live {what}s in one session")

  def _alloc(self, sess, sid, f, blobs):
    self._new_id(sess.bufs, f["buf"], "buffer")
    if f["size"] > self.limits.max_alloc_bytes:
      raise MemoryError(f"{f['size']} bytes is more than the server's limit of {self.limits.max_alloc_bytes} per buffer (--max-alloc-bytes)")
    sess.bufs[f["buf"]] = Buffer(self._device(f["dev"]), f["size"], dtypes.uint8).ensure_allocated()
  def _free(self, sess, sid, f, blobs):
    if sess.bufs.pop(f["buf"], None) is None: raise RequestFailed(f"no buffer {f['buf']} in this session")
    sess.views.pop(f["buf"], None)
  def _copyin(self, sess, sid, f, blobs):
    buf, data = self._buf(sess, f["buf"]), self._blob(sess, f["blob"])
    if len(data) != buf.nbytes: raise RequestFailed(f"copyin of {len(data)} bytes into {buf.nbytes} bytes of buffer {f['buf'][0]}")
    buf.copyin(data)
  def _copyout(self, sess, sid, f, blobs):
    blobs.append(self._buf(sess, f["buf"]).as_bytes())
    return {"blob": len(blobs) - 1}
  def _transfer(self, sess, sid, f, blobs):
    dest, src = self._buf(sess, f["dest"]), self._buf(sess, f["src"])
    if dest.nbytes != src.nbytes: raise RequestFailed(f"transfer between buffers of {src.nbytes} and {dest.nbytes} bytes")
    copy(dest, src)
  def _program(self, sess, sid, f, blobs):
    self._new_id(sess.progs, f["prog"], "program")
    device, info = self._device(f["dev"]), f["info"]
    try: src = self._blob(sess, f["src"]).decode()
    except UnicodeDecodeError: raise RequestFailed("program source is not UTF-8 text") from None
    spec = ProgramSpec(f["name"], src, self.backend, [], local_size=None if info["local"] is None else tuple(info["local"]),
                       outs=tuple(info["outs"]), ins=tuple(info["ins"]), flops=info["flops"] or 0, mem_bytes=info["mem_bytes"] or 0)
    if info["flops"] is None: spec.flops = spec.mem_bytes = None  # symbolic cost: unknown here, like a symbolic spec's
    binary = assemble(device, src, f["name"])   # compiled here, cached on this machine's disk
    sess.progs[f["prog"]] = (device, Device[device].driver.load(f["name"], binary, spec), info["nvars"])
  def _exec(self, sess, sid, f, blobs):
    if (p := sess.progs.get(f["prog"])) is None: raise RequestFailed(f"no program {f['prog']} in this session")
    device, prog, nvars = p
    bufs = [self._buf(sess, i) for i in f["bufs"]]
    if (wrong := [r[0] for r, b in zip(f["bufs"], bufs) if b.device != device]): raise RequestFailed(f"buffers {wrong} are not on {device}")
    if len(f["vals"]) != nvars: raise RequestFailed(f"the program takes {nvars} integer variables, got {len(f['vals'])}")
    return prog(*[b._buf for b in bufs], global_size=tuple(f["global"]), local_size=None if f["local"] is None else tuple(f["local"]),
                vals=tuple(f["vals"]), wait=f["wait"])
  def _sync(self, sess, sid, f, blobs): Device[self._device(f["dev"])].synchronize()
  def _close(self, sess, sid, f, blobs): self.sessions.pop(sid, None)

def _jsonable(d: dict) -> dict:
  return {k: v for k, v in d.items() if isinstance(v, (str, int, float, bool, type(None)))}

class _Handler(BaseHTTPRequestHandler):
  protocol_version = "HTTP/1.1"   # keep-alive: one connection per client
  disable_nagle_algorithm = True  # headers and body are two writes: Nagle + the client's delayed ACK would stall each reply 40 ms
  server: _HTTPServer
  def _reply(self, code: int, body: bytes, ctype: str = "application/octet-stream", close: bool = False) -> None:
    self.send_response(code)
    self.send_header("Content-Type", ctype)
    self.send_header("Content-Length", str(len(body)))
    if close: self.send_header("Connection", "close")
    self.end_headers()
    self.wfile.write(body)
    if close: self.close_connection = True
  def _authorized(self) -> bool:
    got = self.headers.get("Authorization", "")
    return hmac.compare_digest(got.encode(), f"Bearer {self.server.remote.token}".encode())
  def do_GET(self):
    if not self._authorized(): return self._reply(401, b'{"error": "missing or wrong token (REMOTE_TOKEN)"}', "application/json")
    if self.path != "/info": return self._reply(404, b'{"error": "unknown path; use GET /info or POST /batch"}', "application/json")
    self._reply(200, json.dumps(self.server.remote.info()).encode(), "application/json")
  def do_POST(self):
    remote = self.server.remote
    if not self._authorized(): return self._reply(401, encode_reply([], [], "missing or wrong token (REMOTE_TOKEN)", 0), close=True)
    if self.path != "/batch": return self._reply(404, encode_reply([], [], "unknown path; POST /batch", 0), close=True)
    try: n = int(self.headers.get("Content-Length", ""))
    except ValueError: return self._reply(411, encode_reply([], [], "a batch needs a Content-Length", 0), close=True)
    if not 0 <= n <= remote.limits.max_request_bytes:
      return self._reply(413, encode_reply([], [], f"a batch of {n} bytes is over the server's limit of {remote.limits.max_request_bytes} (--max-request-bytes)", 0), close=True)
    self.connection.settimeout(remote.limits.read_timeout_s)
    body = self.rfile.read(n)
    if len(body) != n: return self._reply(400, encode_reply([], [], f"truncated batch: {len(body)} of {n} bytes arrived", 0), close=True)
    self._reply(200, remote.run_batch(body))
  def log_message(self, fmt, *args):
    if self.server.verbose: super().log_message(fmt, *args)

class _HTTPServer(ThreadingHTTPServer):
  daemon_threads = True
  def __init__(self, addr, remote: RemoteServer, verbose: bool):
    super().__init__(addr, _Handler)
    self.remote, self.verbose = remote, verbose

def serve(remote: RemoteServer, host: str, port: int, verbose: bool = False, ready=None) -> None:
  """Serve until interrupted; `ready(url)` is called once the socket listens (the port may have been 0: any free one)."""
  httpd = _HTTPServer((host, port), remote, verbose)
  def janitor():
    while True:
      time.sleep(min(30.0, remote.limits.session_timeout_s))
      remote.expire_sessions()
  threading.Thread(target=janitor, daemon=True).start()
  if ready is not None: ready(f"http://{host}:{httpd.server_address[1]}")
  try: httpd.serve_forever()
  finally: httpd.server_close()
