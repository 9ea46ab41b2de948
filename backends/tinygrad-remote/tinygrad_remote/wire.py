"""The wire format between REMOTE clients and servers: versioned frames of a JSON header and raw blobs, checked against a schema."""
from __future__ import annotations
import hashlib, json, struct
from typing import Any, Callable

VERSION = 1                                  # bumped on any change to the frame or to REQUESTS
REQUEST_MAGIC, REPLY_MAGIC = b"TCRQ", b"TCRP"
_FRAME = struct.Struct("<4sHI")              # magic, version, header length; then the header (UTF-8 JSON), then the blobs

class WireError(ValueError):
  """A frame or request that does not follow the wire format: the peer gets this message back, nothing runs."""

# field checkers: exact types only (bool is not an int here, a float is never a size)
def _int(v) -> bool: return type(v) is int
def _nat(v) -> bool: return type(v) is int and v >= 0
def _str(v) -> bool: return type(v) is str and len(v) <= 4096
def _bool(v) -> bool: return type(v) is bool
def _nats(v) -> bool: return type(v) is list and len(v) <= 65536 and all(_nat(x) for x in v)
def _ints(v) -> bool: return type(v) is list and len(v) <= 65536 and all(_int(x) for x in v)
def _dims(v) -> bool: return type(v) is list and len(v) == 3 and all(_nat(x) for x in v)
def _opt_dims(v) -> bool: return v is None or _dims(v)
def _sha(v) -> bool: return type(v) is str and len(v) == 64 and all(c in "0123456789abcdef" for c in v)
def _opt_nat(v) -> bool: return v is None or _nat(v)
def _ref(v) -> bool: return type(v) is list and len(v) == 3 and all(_nat(x) for x in v)   # [buffer id, byte offset, bytes]
def _refs(v) -> bool: return type(v) is list and len(v) <= 65536 and all(_ref(x) for x in v)
def _program_info(v) -> bool:
  return type(v) is dict and set(v) == {"outs", "ins", "flops", "mem_bytes", "nvars", "local"} and _nats(v["outs"]) and \
    _nats(v["ins"]) and _opt_nat(v["flops"]) and _opt_nat(v["mem_bytes"]) and _nat(v["nvars"]) and _opt_dims(v["local"])

# every request the server understands: op -> its fields and their checkers (rules as data: the server dispatches on op).
# A buffer is referred to as [id, offset, size]: a view is a reference, never a server object of its own.
REQUESTS: dict[str, dict[str, Callable[[Any], bool]]] = {
  "alloc":    {"buf": _nat, "dev": _nat, "size": _nat},          # a new buffer of `size` bytes on instance `dev`, named `buf`
  "free":     {"buf": _nat},                                     # the buffer and every view of it
  "copyin":   {"buf": _ref, "blob": _sha},                       # blob: uploaded in this batch or an earlier one
  "copyout":  {"buf": _ref},                                     # replies with the bytes
  "transfer": {"dest": _ref, "src": _ref},                       # between two buffers of the server, any instances
  "program":  {"prog": _nat, "dev": _nat, "name": _str, "src": _sha, "info": _program_info},
  "exec":     {"prog": _nat, "bufs": _refs, "global": _dims, "local": _opt_dims, "vals": _ints, "wait": _bool},
  "sync":     {"dev": _nat},
  "close":    {},                                                # the client is done: free everything of its session
}

BLOB_FIELDS = {"copyin": "blob", "program": "src"}   # the requests that name an upload, and the field that does

def blob_id(data: bytes | memoryview) -> str: return hashlib.sha256(data).hexdigest()

def _encode(magic: bytes, header: dict, blobs: list[bytes]) -> bytes:
  head = json.dumps(header, separators=(",", ":")).encode()
  return b"".join([_FRAME.pack(magic, VERSION, len(head)), head, *blobs])

def _decode(magic: bytes, body: bytes, what: str) -> tuple[dict, memoryview]:
  if len(body) < _FRAME.size: raise WireError(f"truncated {what}: {len(body)} bytes, shorter than the {_FRAME.size}-byte frame header")
  got_magic, version, hlen = _FRAME.unpack_from(body)
  if got_magic != magic: raise WireError(f"not a tinygrad-remote {what} (magic {got_magic!r}, expected {magic!r})")
  if version != VERSION: raise WireError(f"{what} speaks wire version {version}, this side speaks {VERSION}: install the same tinygrad-remote on both")
  if hlen > len(body) - _FRAME.size: raise WireError(f"truncated {what}: header of {hlen} bytes, {len(body) - _FRAME.size} present")
  try: header = json.loads(bytes(body[_FRAME.size:_FRAME.size + hlen]))
  except (UnicodeDecodeError, ValueError) as e: raise WireError(f"{what} header is not valid JSON: {e}") from None
  if type(header) is not dict: raise WireError(f"{what} header must be a JSON object")
  return header, memoryview(body)[_FRAME.size + hlen:]

def _split_blobs(lengths, rest: memoryview, what: str) -> list[memoryview]:
  if type(lengths) is not list or not all(_nat(n) for n in lengths): raise WireError(f"{what}: 'blobs' must be a list of byte lengths")
  if sum(lengths) != len(rest): raise WireError(f"{what}: blobs announce {sum(lengths)} bytes, the body carries {len(rest)}")
  out, at = [], 0
  for n in lengths: out.append(rest[at:at+n]); at += n
  return out

# ***** requests: client -> server *****

def encode_batch(session: str, requests: list[tuple[str, dict]], blobs: list[bytes]) -> bytes:
  """A batch: requests run in order; `blobs` are new uploads, addressed by their SHA-256 from copyin/program requests."""
  return _encode(REQUEST_MAGIC, {"session": session, "requests": [[op, f] for op, f in requests], "blobs": [len(b) for b in blobs]}, blobs)

def decode_batch(body: bytes) -> tuple[str, list[tuple[str, dict]], dict[str, memoryview]]:
  """(session, checked requests, uploaded blobs by SHA-256). Raises WireError naming the first thing wrong."""
  header, rest = _decode(REQUEST_MAGIC, body, "request")
  if set(header) != {"session", "requests", "blobs"}: raise WireError(f"request header needs exactly session, requests, blobs; got {sorted(header)}")
  session, reqs = header["session"], header["requests"]
  if not (_str(session) and 8 <= len(session) <= 128): raise WireError("request: 'session' must be a string of 8 to 128 characters")
  if type(reqs) is not list: raise WireError("request: 'requests' must be a list")
  checked = []
  for i, r in enumerate(reqs):
    if not (type(r) is list and len(r) == 2 and type(r[0]) is str and type(r[1]) is dict): raise WireError(f"request {i}: must be [op, {{fields}}]")
    op, fields = r
    if (schema := REQUESTS.get(op)) is None: raise WireError(f"request {i}: unknown op {op[:64]!r}; this server knows {sorted(REQUESTS)}")
    if set(fields) != set(schema): raise WireError(f"request {i} ({op}): fields {sorted(fields)[:16]}, expected {sorted(schema)}")
    for k, ok in schema.items():
      if not ok(fields[k]): raise WireError(f"request {i} ({op}): field {k!r} has a bad value {str(fields[k])[:64]}")
    checked.append((op, fields))
  return session, checked, {blob_id(b): b for b in _split_blobs(header["blobs"], rest, "request")}

# ***** replies: server -> client *****

def encode_reply(results: list[Any], blobs: list[bytes], error: str | None = None, failed: int | None = None) -> bytes:
  """`results[i]` answers request i (None, a number, or {"blob": k} for blob k of this reply); on an error, the requests
  before `failed` ran and the rest did not."""
  return _encode(REPLY_MAGIC, {"results": results, "blobs": [len(b) for b in blobs], "error": error, "failed": failed}, blobs)

def decode_reply(body: bytes) -> tuple[list[Any], list[memoryview], str | None, int | None]:
  header, rest = _decode(REPLY_MAGIC, body, "reply")
  if set(header) != {"results", "blobs", "error", "failed"} or type(header["results"]) is not list:
    raise WireError(f"malformed reply header: {sorted(header)}")
  return header["results"], _split_blobs(header["blobs"], rest, "reply"), header["error"], header["failed"]
