"""On-disk cache for assembled binaries and BEAM choices; a corrupt entry is detected by its checksum and rebuilt."""
from __future__ import annotations
import hashlib, os, pickle, tempfile
from typing import Any, Callable
from tinycore.helpers import cache_dir, CACHELEVEL

def _path(table: str, key: str) -> str:
  return os.path.join(os.environ.get("TINYCORE_CACHE") or cache_dir(), table, key[:2], key)

def cache_key(*parts: Any) -> str: return hashlib.sha256(repr(parts).encode()).hexdigest()

def diskcache_get(table: str, key: str) -> bytes | None:
  """The stored bytes, or None when absent or corrupt (a corrupt entry is removed)."""
  if CACHELEVEL < 1: return None
  p = _path(table, key)
  try:
    with open(p, "rb") as f: blob = f.read()
  except OSError: return None
  digest, payload = blob[:32], blob[32:]
  if len(blob) < 32 or hashlib.sha256(payload).digest() != digest:
    try: os.unlink(p)
    except OSError: pass
    return None
  return payload

def diskcache_put(table: str, key: str, payload: bytes) -> None:
  if CACHELEVEL < 1: return
  p = _path(table, key)
  try:
    os.makedirs(os.path.dirname(p), exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(p))
    with os.fdopen(fd, "wb") as f: f.write(hashlib.sha256(payload).digest() + payload)
    os.replace(tmp, p)  # atomic: readers never see half a file
  except OSError: pass  # a read-only or full disk only costs a recompile

def diskcached(table: str, key: str, build: Callable[[], bytes]) -> bytes:
  if (hit := diskcache_get(table, key)) is not None: return hit
  out = build()
  diskcache_put(table, key, out)
  return out

def diskcache_get_obj(table: str, key: str) -> Any:
  raw = diskcache_get(table, key)
  if raw is None: return None
  try: return pickle.loads(raw)
  except Exception: return None
def diskcache_put_obj(table: str, key: str, obj: Any) -> None: diskcache_put(table, key, pickle.dumps(obj))
