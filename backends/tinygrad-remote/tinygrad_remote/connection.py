"""The client's link to a REMOTE server: a queue of requests sent as one batch when a reply is needed, uploads by hash."""
from __future__ import annotations
import atexit, http.client, itertools, json, os, re, secrets, socket, threading
from typing import Any
from urllib.parse import urlsplit
from tinycore.runtime.errors import CompileError, DeviceError
from tinygrad_remote.wire import BLOB_FIELDS, WireError, blob_id, encode_batch, decode_reply

FLUSH_BYTES = 64 << 20   # queued uploads past this are sent without waiting for a reply-needing request
FLUSH_REQUESTS = 4096
_MISSING = re.compile(r"missing blob ([0-9a-f]{64})$")

def settings() -> tuple[str, str, float]:
  """REMOTE_URL, the token (REMOTE_TOKEN, or the file named by REMOTE_TOKEN_FILE), and REMOTE_TIMEOUT seconds."""
  url = os.environ.get("REMOTE_URL", "")
  if not url: raise DeviceError("REMOTE: set REMOTE_URL to the server (python -m tinygrad_remote serve prints it), e.g. REMOTE_URL=http://127.0.0.1:6667")
  token = os.environ.get("REMOTE_TOKEN", "")
  if not token and (path := os.environ.get("REMOTE_TOKEN_FILE")):
    with open(path) as f: token = f.read().strip()
  if not token: raise DeviceError("REMOTE: set REMOTE_TOKEN (or REMOTE_TOKEN_FILE) to the server's token")
  return url, token, float(os.environ.get("REMOTE_TIMEOUT", "120"))

class Connection:
  """One per process and server, shared by every REMOTE instance: requests queue up and go in one batch (one round trip)
  when a result is needed. Buffer and program ids are chosen here, so queued requests can name what earlier ones make."""
  def __init__(self, url: str, token: str, timeout: float):
    parts = urlsplit(url)
    if parts.scheme != "http" or not parts.hostname: raise DeviceError(f"REMOTE_URL must be http://host:port, got {url!r}")
    self.url, self.token, self.timeout = url, token, timeout
    self.host, self.port = parts.hostname, parts.port or 80
    self.session = secrets.token_hex(16)
    self.ids = itertools.count(1)
    self.queue: list[tuple[str, dict]] = []
    self.payloads: dict[str, bytes] = {}      # data of blobs the queued requests name, kept until the batch is answered
    self.uploaded: set[str] = set()           # blobs the server was sent (it may have dropped some since: it says so)
    self.queued_bytes = 0
    self.round_trips, self.bytes_sent = 0, 0   # counters: a training step should cost one round trip
    self.lock = threading.RLock()
    self._http: http.client.HTTPConnection | None = None
    self._info: dict | None = None
    atexit.register(self.close)

  # ***** HTTP *****
  def _request(self, method: str, path: str, body: bytes | None = None) -> tuple[int, bytes]:
    try:
      if self._http is None:
        self._http = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
        self._http.connect()
        self._http.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)   # a batch is one write; never wait to coalesce
      self._http.request(method, path, body=body, headers={"Authorization": f"Bearer {self.token}", "Content-Type": "application/octet-stream"})
      resp = self._http.getresponse()
      data = resp.read()
      if resp.getheader("Connection", "").lower() == "close": self._drop()
      self.round_trips += 1
      self.bytes_sent += len(body or b"")
      return resp.status, data
    except (OSError, http.client.HTTPException) as e:
      self._drop()
      raise DeviceError(f"REMOTE: the server at {self.url} did not answer ({type(e).__name__}: {e}); is `python -m tinygrad_remote serve` running there?") from e
  def _drop(self) -> None:
    if self._http is not None: self._http.close()
    self._http = None

  def info(self) -> dict:
    """What the server serves: backend, package, version, instances, capabilities, limits (asked once)."""
    with self.lock:
      if self._info is None:
        status, data = self._request("GET", "/info")
        try: body = json.loads(data)
        except ValueError: body = {"error": data[:200]}
        if status != 200: raise DeviceError(f"REMOTE: the server at {self.url} refused: {body.get('error', status)}")
        self._info = body
      return self._info

  # ***** the queue *****
  def new_id(self) -> int: return next(self.ids)
  def attach(self, data: bytes) -> str:
    """Name `data` by its hash for a queued request; the bytes travel only if the server was not sent them before."""
    key = blob_id(data)
    if key not in self.payloads:
      self.payloads[key] = data
      if key not in self.uploaded: self.queued_bytes += len(data)
    return key
  def send(self, op: str, **fields) -> None:
    with self.lock:
      self.queue.append((op, fields))
      if len(self.queue) >= FLUSH_REQUESTS or self.queued_bytes >= FLUSH_BYTES: self.flush()
  def call(self, op: str, **fields) -> tuple[Any, list[memoryview]]:
    """Queue a request that needs its reply, send everything queued, and return (its result, the reply's blobs)."""
    with self.lock:
      self.queue.append((op, fields))
      results, blobs = self.flush()
      return results[-1], blobs
  def flush(self) -> tuple[list[Any], list[memoryview]]:
    with self.lock:
      if not self.queue: return [], []
      queue, payloads = self.queue, self.payloads
      self.queue, self.payloads, self.queued_bytes = [], {}, 0
      results: list[Any] = []
      while True:
        named = {f[BLOB_FIELDS[op]] for op, f in queue if op in BLOB_FIELDS}
        fresh = [k for k in payloads if k in named and k not in self.uploaded]
        status, body = self._request("POST", "/batch", encode_batch(self.session, queue, [payloads[k] for k in fresh]))
        self.uploaded.update(fresh)
        try: got, blobs, error, failed = decode_reply(body)
        except WireError as e: raise DeviceError(f"REMOTE: the server at {self.url} sent a bad reply (HTTP {status}): {e}") from None
        results += got
        if error is None: return results, blobs
        if failed is not None and (m := _MISSING.search(error)) and m.group(1) in payloads:  # the server dropped it: send again
          self.uploaded.discard(m.group(1))
          queue = queue[failed:]
          continue
        where = f" at request {failed} of the batch ({queue[failed][0]})" if failed is not None and failed < len(queue) else ""
        op = queue[failed][0] if failed is not None and failed < len(queue) else ""
        err = MemoryError if error.startswith("alloc: ") and "limit" in error else CompileError if op == "program" else DeviceError
        raise err(f"REMOTE: the server at {self.url} failed{where}: {error}")

  def close(self) -> None:
    """Tell the server this session is over (its buffers are freed); best effort at exit."""
    try:
      with self.lock:
        self.queue, self.payloads = [("close", {})], {}
        if self._http is not None or self.round_trips: self.flush()
    except Exception: pass
    finally: self._drop()

_connection: Connection | None = None
def connection() -> Connection:
  global _connection
  if _connection is None: _connection = Connection(*settings())
  return _connection
