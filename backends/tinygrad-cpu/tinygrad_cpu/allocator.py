"""CPU memory: 64-byte aligned host buffers (numpy-owned), zero-copy views at byte offsets."""
from __future__ import annotations
import ctypes, functools, mmap, os
import numpy as np
from tinycore.runtime.device import LRUAllocator

class CPUBuffer:
  """An address kernels get, the bytes as a memoryview, and the array that owns them (kept alive by every view)."""
  __slots__ = ("addr", "mv", "owner")
  def __init__(self, addr: int, mv: memoryview, owner: np.ndarray): self.addr, self.mv, self.owner = addr, mv, owner

ALIGN = 64  # a cache line, and the widest vector load

class CPUAllocator(LRUAllocator):
  supports_offset = True
  def __init__(self, driver=None): super().__init__(driver.device if driver is not None else "CPU")
  def _alloc(self, size: int, options) -> CPUBuffer:
    if GUARD: return _guarded(size, GUARD)
    raw = np.empty(size + ALIGN, np.uint8)
    off = -raw.ctypes.data % ALIGN
    return CPUBuffer(raw.ctypes.data + off, raw[off:off+size].data, raw)
  def _copyin(self, dest: CPUBuffer, src: memoryview) -> None: dest.mv[:] = src
  def _copyout(self, dest: memoryview, src: CPUBuffer) -> None: dest[:] = src.mv
  def _offset(self, buf: CPUBuffer, size: int, offset: int) -> CPUBuffer: return CPUBuffer(buf.addr + offset, buf.mv[offset:offset+size], buf.owner)
  def _as_buffer(self, buf: CPUBuffer) -> memoryview: return buf.mv

# CPU_GUARD=after (or before): every buffer flush against an inaccessible page, so a kernel reading or writing past its
# end (before its start) stops with SIGSEGV at that access instead of touching a neighbour's bytes (a debugging aid: a
# page and a system call per buffer). "after" leaves under ALIGN bytes unguarded at the end, to keep buffers aligned.
GUARD = os.environ.get("CPU_GUARD", "").lower()
if GUARD not in ("", "after", "before"): raise ValueError(f"CPU_GUARD={GUARD!r}: use 'after' or 'before' (or leave it unset)")

@functools.cache
def _libc() -> ctypes.CDLL: return ctypes.CDLL(None, use_errno=True)   # for mprotect, which the mmap module lacks

def _guarded(size: int, where: str) -> CPUBuffer:
  page = mmap.PAGESIZE
  span = -(-max(size, 1) // page) * page
  m = mmap.mmap(-1, span + 2 * page)
  base = ctypes.addressof(ctypes.c_char.from_buffer(m))
  libc = _libc()
  for at in (base, base + page + span):   # PROT_NONE (0): no access
    if libc.mprotect(ctypes.c_void_p(at), ctypes.c_size_t(page), 0) != 0: raise OSError(ctypes.get_errno(), "CPU_GUARD: mprotect failed")
  off = page if where == "before" else (page + span - size) // ALIGN * ALIGN
  return CPUBuffer(base + off, memoryview(m)[off:off+size], m)
