"""A PTX interpreter (NV_EMULATE=1): each kernel is decoded once into Python closures, then run over numpy lanes (all
threads of many thread blocks at once) with per-lane program counters when branches diverge. It models what the
hardware gives a kernel: thread blocks of warps of 32 (shuffles and tensor-core instructions work on whole warps),
each block's shared memory, barriers that hold a block's threads until all of them that have not exited arrive, and
global memory in host RAM. Every launch is counted (LaunchCounters: bytes moved, barriers, instructions)."""
from __future__ import annotations
import bisect, collections, re
from dataclasses import dataclass, field
from typing import Any, Callable
import numpy as np
from tinycore.dtype import fma, tensor_core_dot
from tinycore.runtime.device import LaunchCounters

class EmulatorError(RuntimeError):
  """The emulated kernel did something PTX does not allow (or the emulator does not know): the message names it."""

NP = {"pred": np.bool_, "b8": np.uint8, "u8": np.uint8, "s8": np.int8, "b16": np.uint16, "u16": np.uint16, "s16": np.int16,
      "f16": np.float16, "b32": np.uint32, "u32": np.uint32, "s32": np.int32, "f32": np.float32, "b64": np.uint64,
      "u64": np.uint64, "s64": np.int64, "f64": np.float64}
LANES = 1 << 16   # threads run together: whole blocks, up to about this many
WARP = 32
MAX_THREADS, MAX_STATIC_SHARED = 1024, 48 * 1024   # per block: the launch limit, and ptxas's limit on static .shared
SHARED_WINDOW = 1 << 56   # generic addresses [SHARED_WINDOW, SHARED_WINDOW + 2**32) are the block's shared memory (cvta.shared)

# ***** shared-memory banks *****
# Shared memory is 32 banks, successive 4-byte words in successive banks; each bank serves one word a cycle, and lanes
# reading the same word share it (CUDA C++ Programming Guide, "Shared Memory" of compute capability 5.x and later: a
# request has as many conflicts as the most distinct words one bank must give). The unit serves a request in wavefronts,
# each at most 128 bytes, the 32 banks' one word each (Nsight Compute's model, NVIDIA forum "What's the difference
# between wavefronts and sectors/req", and "Unexpected shared memory bank conflict": an LDS.128 of 32 threads takes 4):
# so an access of 8 bytes a lane is served a half-warp at a time, of 16 bytes a quarter-warp at a time, each phase's
# lanes together, and ldmatrix serves each 8x8 matrix (its 8 rows of 16 bytes, from 8 lanes' addresses) as one phase.
# A phase takes as many wavefronts as the most distinct words any one bank holds of it (at least one).
BANKS, BANK_BYTES = 32, 4

def wavefronts(phase: np.ndarray, offs: np.ndarray, size: int) -> tuple[int, int]:
  """(wavefronts, phases) of one warp instruction's shared accesses: lane k reads or writes `size` bytes at byte offset
  offs[k] (below 2^31) in phase phase[k] (a number per warp and phase, non-decreasing over the lanes); each phase's
  accesses are at most 32 words."""
  if phase.size == 0: return 0, 0
  words = max(1, size // BANK_BYTES)
  word = ((offs.astype(np.int64) // BANK_BYTES).astype(np.int32)[:, None] + np.arange(words, dtype=np.int32)).reshape(-1)
  word = word % BANKS << 24 | word // BANKS   # bank << 24 | the word's row of banks: sorted, each bank's words together
  starts = np.flatnonzero(np.concatenate([[True], phase[1:] != phase[:-1]]))
  if len(starts) * BANKS == word.size: key = word.reshape(-1, BANKS)   # every phase whole
  else:
    row = np.repeat(np.arange(len(starts)), np.diff(np.append(starts, phase.size)))
    key = np.full((len(starts), BANKS), -1, np.int32)
    key.reshape(-1)[((row * BANKS + (np.arange(phase.size) - starts[row]) * words)[:, None] + np.arange(words)).reshape(-1)] = word
  key = np.sort(key, axis=1)
  # a word several lanes access is served once (a broadcast); a bank serves its distinct words one a wavefront
  distinct = np.concatenate([key[:, :1] >= 0, (key[:, 1:] != key[:, :-1]) & (key[:, 1:] >= 0)], axis=1)
  per_bank = np.bincount((np.arange(len(starts))[:, None] * BANKS + (key >> 24 & (BANKS - 1))).reshape(-1), distinct.reshape(-1), len(starts) * BANKS)
  return int(per_bank.reshape(-1, BANKS).max(axis=1).sum()), len(starts)

# ***** counters *****

LAUNCHES: collections.deque[tuple[str, LaunchCounters]] = collections.deque(maxlen=10_000)   # (kernel name, counters) of recent launches

# ***** global memory *****

class EmulatedMemory:
  """Buffers of host RAM at device-like addresses (never reused), so pointers, offsets and pointer arithmetic work as on a GPU."""
  def __init__(self):
    self.bases: list[int] = []
    self.bufs: dict[int, np.ndarray] = {}
    self.next = 1 << 32
  def alloc(self, size: int) -> int:
    arr = np.zeros((size + 15) // 16 * 16, np.uint8)   # raises MemoryError for impossible sizes
    addr, self.next = self.next, self.next + (size + 511) // 256 * 256
    bisect.insort(self.bases, addr)
    self.bufs[addr] = arr
    return addr
  def free(self, addr: int) -> None:
    if self.bufs.pop(addr, None) is None: raise EmulatorError(f"NV emulator: free of {addr:#x}, which is not an allocation")
    del self.bases[bisect.bisect_left(self.bases, addr)]
  def span(self, addr: int, size: int) -> np.ndarray:
    """The bytes [addr, addr + size) as a numpy view; an error unless they lie in one live buffer."""
    i = bisect.bisect_right(self.bases, addr) - 1
    if i < 0: raise EmulatorError(f"NV emulator: address {addr:#x} is not in any buffer")
    base = self.bases[i]
    arr = self.bufs[base]
    if addr + size > base + arr.size: raise EmulatorError(f"NV emulator: {size} bytes at {addr:#x} run past the end of the buffer at {base:#x} ({arr.size} bytes)")
    return arr[addr - base:addr - base + size]
  def elements(self, addrs: np.ndarray, ty: str, what: str, vec: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """(a typed view of the one buffer every address lies in, element indices), checking bounds and alignment (a vector
    access of vec elements must be aligned to its whole size)."""
    size = np.dtype(NP[ty]).itemsize
    lo, hi = int(addrs.min()), int(addrs.max())
    i = bisect.bisect_right(self.bases, lo) - 1
    base = self.bases[i] if i >= 0 else 0
    arr = self.bufs.get(base)
    if arr is None or hi + size * vec > base + arr.size:
      raise EmulatorError(f"NV emulator: {what} of {vec if vec > 1 else ''}{'x' if vec > 1 else ''}{ty} at addresses [{lo:#x}, {hi:#x}] outside one allocated buffer")
    off = addrs - np.uint64(base)
    if size * vec > 1 and np.any(off % np.uint64(size * vec)):
      raise EmulatorError(f"NV emulator: misaligned {what} of {vec}x{ty} (addresses must be multiples of {size * vec})")
    return arr.view(NP[ty]), (off // np.uint64(size)).astype(np.int64)

# ***** the threads of one batch of blocks *****

@dataclass
class Thread:
  """What the instructions of one running batch see: registers (arrays over lanes), special registers, params, the mask,
  each lane's block (in the batch) and linear thread id, the batch's shared memory (blocks, bytes) and its counters."""
  regs: dict[str, np.ndarray]
  special: dict[str, Any]
  params: dict[str, Any]
  memory: EmulatedMemory
  n: int
  mask: np.ndarray | None = None   # lanes executing this instruction when branches diverged (None: all)
  block: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
  tid: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))   # linear thread id in the block
  warps_per_block: int = 1
  shared: np.ndarray = field(default_factory=lambda: np.zeros((1, 16), np.uint8))   # (blocks, bytes rounded up to 16)
  shared_size: int = 0   # bytes of shared memory a block has
  counters: LaunchCounters = field(default_factory=LaunchCounters)
  # cp.async copies issued and not yet waited for, each (the issuing lanes' keys: block << 20 | thread, the destination
  # bytes' indices in the flat shared array, the bytes), and the shared bytes they are still to write (None: none)
  pending: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = field(default_factory=list)
  inflight: np.ndarray | None = None
  # per 4-byte word of the batch's shared memory: the barrier epoch of its last write and the warp that wrote it, and of
  # its last read and the warp that read it (-1: several), so two warps' accesses to a word with no barrier between
  # them, one a write, are caught (ordered()); None: a kernel without shared memory
  write_epoch: np.ndarray | None = None
  write_warp: np.ndarray | None = None
  read_epoch: np.ndarray | None = None
  read_warp: np.ndarray | None = None
  epoch: int = 0   # barriers the batch's blocks have passed
  def __post_init__(self): self.lanes_changed()
  def lanes_changed(self) -> None:
    self.warp = self.block * self.warps_per_block + self.tid // WARP   # each lane's warp (its slot in the batch), ascending
    self.live_warps = int(np.count_nonzero(np.diff(self.warp))) + 1 if self.n else 0
    self._table: np.ndarray | None = None
  def keep(self, alive: np.ndarray) -> None:
    """Drop the lanes that exited: nothing reads them again."""
    for k, v in self.regs.items(): self.regs[k] = v[alive]
    self.special = {k: (v[alive] if isinstance(v, np.ndarray) else v) for k, v in self.special.items()}
    self.block, self.tid, self.n = self.block[alive], self.tid[alive], int(alive.sum())
    self.lanes_changed()
  def table(self) -> np.ndarray:
    """(warp slots, 32): the lane index of each thread of each warp, -1 where the thread does not exist or has exited."""
    if self._table is None:
      self._table = np.full((self.shared.shape[0] * self.warps_per_block, WARP), -1, np.int64)
      self._table[self.warp, self.tid % WARP] = np.arange(self.n)
    return self._table
  def active(self) -> np.ndarray: return np.ones(self.n, bool) if self.mask is None else self.mask
  def who(self, lane: int) -> str:
    """Lane `lane` named as the programmer sees it: its block and thread."""
    sp = self.special
    return (f"block ({', '.join(str(int(np.asarray(sp[f'%ctaid.{k}'])[lane])) for k in 'xyz')}) thread "
            f"({', '.join(str(int(np.asarray(sp[f'%tid.{k}'])[lane])) for k in 'xyz')})")
  def count(self, what: str, lanes: np.ndarray | None, nbytes: int) -> None:
    """Add nbytes per active lane (lanes: a mask, or None for all) to counter `what`."""
    k = self.n if lanes is None else int(np.count_nonzero(lanes))
    setattr(self.counters, what, getattr(self.counters, what) + k * nbytes)
  def count_sectors(self, lanes, idx: np.ndarray, size: int) -> None:
    """Count the 32-byte sectors of global memory one warp-wide access touches: per warp, the distinct sectors holding
    its active lanes' bytes (idx: each lane's first element of `size` bytes, counted from its buffer's start, which is
    256-byte aligned; an access is at most 16 bytes, aligned to its size, so it lies in one sector). That is how the
    memory system serves a warp (CUDA C++ Best Practices Guide, "Coalesced Access to Global Memory": as many 32-byte
    transactions as the sectors its threads' accesses fall in)."""
    if idx.size == 0: return
    warp = self.warp if lanes is None else self.warp[lanes]
    key = warp << 36 | idx * size >> 5   # (a buffer is under 2^41 bytes: sector numbers under 2^36)
    if (step := np.diff(key)).size and step.min() < 0: step = np.diff(np.sort(key))   # lanes not in address order
    self.counters.global_sectors += int(np.count_nonzero(step)) + 1
  def count_banks(self, phase: np.ndarray, offs: np.ndarray, size: int) -> None:
    """Count the wavefronts of one instruction's shared accesses (wavefronts() above)."""
    waves, least = wavefronts(phase, offs, size)
    self.counters.shared_wavefronts += waves
    self.counters.shared_conflicts += waves - least
  def shared_access(self, offs: np.ndarray, lanes, size: int) -> None:
    """Count a warp-wide ld/st.shared of `size` bytes a lane: a phase is 128 bytes' worth of a warp's lanes."""
    per = WARP // max(1, size // BANK_BYTES)
    warp, tid = (self.warp, self.tid) if lanes is None else (self.warp[lanes], self.tid[lanes])
    self.count_banks(warp * (WARP // per) + tid % WARP // per, offs, size)

  # ***** memory accesses by state space: addresses are per active lane *****
  def shared_index(self, offs: np.ndarray, lanes, size: int, what: str) -> np.ndarray:
    """Byte offsets in the block's shared memory -> indices of size-byte elements of the batch's flat shared array."""
    offs = offs.astype(np.int64)
    limit = self.shared_size
    bad = (offs < 0) | (offs + size > limit)
    if bad.any():
      k = int(np.flatnonzero(bad)[0])
      lane = k if lanes is None else int(np.flatnonzero(lanes)[k])
      raise EmulatorError(f"NV emulator: {what} of {size} bytes at shared address {int(offs[k])} by {self.who(lane)} is outside "
                          f"the block's {limit} bytes of shared memory")
    if np.any(offs % size): raise EmulatorError(f"NV emulator: misaligned shared {what} of {size} bytes (addresses must be multiples of {size})")
    blk = self.block if lanes is None else self.block[lanes]
    at = (blk * self.shared.shape[1] + offs)[:, None] + np.arange(size)
    self.not_in_flight(at, lanes, what)
    self.ordered(at, lanes, what)
    return (blk * self.shared.shape[1] + offs) // size
  def ordered(self, at: np.ndarray, lanes, what: str) -> None:
    """Two warps' accesses to one shared word, one of them a write, are ordered only by a barrier between them (PTX's
    memory consistency model; without one the hardware gives either order): an access (bytes `at`, a row per active
    lane; `what` "load" or "ldmatrix" reads, anything else writes) after another warp's write to its words in this
    barrier epoch, or a write after another warp's read, is an error naming the accessing thread. Accesses of whole
    4-byte words are tracked (a narrower one is not: two warps may write two halves of a word)."""
    if self.write_epoch is None or at.shape[1] < 4: return
    words = at[:, ::4] // 4
    warps = np.repeat(self.warp if lanes is None else self.warp[lanes], words.shape[1])
    b, e = words.reshape(-1), self.epoch
    write = what not in ("load", "ldmatrix")
    other = (self.write_epoch[b] == e) & (self.write_warp[b] != warps)
    if write: other |= (self.read_epoch[b] == e) & (self.read_warp[b] != warps)
    if write:   # two warps writing one word in this one instruction
      self.write_warp[b] = warps
      other |= self.write_warp[b] != warps
    if other.any():
      k = int(np.flatnonzero(other)[0]) // words.shape[1]
      lane = k if lanes is None else int(np.flatnonzero(lanes)[k]) if lanes.dtype == bool else int(lanes[k])
      raise EmulatorError(f"NV emulator: shared {what} by {self.who(lane)} at shared address {int(at[k, 0]) % self.shared.shape[1]} "
                          f"{'meets' if write else 'reads'} a word another warp of its block {'read or wrote' if write else 'wrote'} since the last "
                          f"barrier: a race (a bar.sync between the two orders them)")
    if write: self.write_epoch[b] = e
    else:
      before = (self.read_epoch[b] == e) & (self.read_warp[b] != warps)
      self.read_warp[b] = warps
      several = before | (self.read_warp[b] != warps)   # read by another warp earlier in the epoch, or in this instruction
      self.read_warp[b[several]] = -1
      self.read_epoch[b] = e
  def key(self, lanes) -> np.ndarray:
    """Each active lane's thread as a number that outlives lanes exiting: its block in the batch << 20 | its thread id."""
    return (self.block << 20 | self.tid) if lanes is None else (self.block[lanes] << 20 | self.tid[lanes])
  def not_in_flight(self, byte_idx: np.ndarray, lanes, what: str) -> None:
    """An error where an access (each active lane's bytes: indices into the flat shared array) touches shared memory a
    cp.async has not yet written: its data lands only when the issuing thread waits (cp.async.wait_all), which a barrier
    alone does not do; until then the hardware gives the old bytes or the new, in no order."""
    if self.inflight is None or not (hit := self.inflight.reshape(-1)[byte_idx].reshape(len(byte_idx), -1).any(axis=1)).any(): return
    k = int(np.flatnonzero(hit)[0])
    lane = k if lanes is None else int(np.flatnonzero(lanes)[k])
    raise EmulatorError(f"NV emulator: shared {what} by {self.who(lane)} at shared address {int(byte_idx[k].flat[0]) % self.shared.shape[1]} "
                        f"reaches bytes a cp.async is still copying (its thread has not waited with cp.async.wait_all)")

  def load(self, space: str, addrs: np.ndarray, lanes, ty: str, vec: int) -> np.ndarray:
    """(lanes, vec) values of type ty from the addresses of the active lanes."""
    size = np.dtype(NP[ty]).itemsize
    if space == "generic": space, addrs = self.resolve(addrs)
    if space == "shared":
      idx = self.shared_index(addrs, lanes, size * vec, "load") * vec
      self.count("shared_read", lanes, size * vec)
      self.shared_access(addrs, lanes, size * vec)
      return self.shared.reshape(-1).view(NP[ty])[idx[:, None] + np.arange(vec)]
    view, idx = self.memory.elements(addrs, ty, "load", vec)
    self.count("global_read", lanes, size * vec)
    self.count_sectors(lanes, idx, size)
    return view[idx[:, None] + np.arange(vec)]
  def store(self, space: str, addrs: np.ndarray, lanes, ty: str, vals: np.ndarray) -> None:
    size, vec = np.dtype(NP[ty]).itemsize, vals.shape[1]
    if space == "generic": space, addrs = self.resolve(addrs)
    if space == "shared":
      idx = self.shared_index(addrs, lanes, size * vec, "store") * vec
      self.count("shared_written", lanes, size * vec)
      self.shared_access(addrs, lanes, size * vec)
      self.shared.reshape(-1).view(NP[ty])[idx[:, None] + np.arange(vec)] = vals
      return
    view, idx = self.memory.elements(addrs, ty, "store", vec)
    self.count("global_written", lanes, size * vec)
    self.count_sectors(lanes, idx, size)
    view[idx[:, None] + np.arange(vec)] = vals
  def resolve(self, addrs: np.ndarray) -> tuple[str, np.ndarray]:
    """A generic access: the shared window or global memory (one of them for every lane)."""
    win = (addrs >= np.uint64(SHARED_WINDOW)) & (addrs < np.uint64(SHARED_WINDOW + 2**32))
    if win.all(): return "shared", (addrs - np.uint64(SHARED_WINDOW)).astype(np.int64)
    if win.any(): raise EmulatorError("NV emulator: one generic access reaches both shared and global memory")
    return "global", addrs

# ***** decoding *****

@dataclass
class Instr:
  text: str
  kind: str                               # "op", "bra", "exit", "bar"
  guard: tuple[str, bool] | None          # (predicate register, negated)
  run: Callable[[Thread], None] | None = None
  target: int = -1
  label: str = ""
  barrier: Callable[[Thread], np.ndarray] | None = None   # bar: the barrier number of each lane
  aligned: bool = True                    # bar: every thread of a warp must execute this same instruction

def parse_imm(tok: str, ty: str):
  """An immediate operand as a value of type ty; 0f/0d literals are bit patterns (of an f32/f64, or of a .b32/.b64 operand)."""
  kind = ty[0]
  if tok.startswith(("0f", "0F", "0d", "0D")):
    bits = np.array(int(tok[2:], 16), np.uint32 if tok[1] in "fF" else np.uint64)
    if bits.dtype.itemsize != np.dtype(NP[ty]).itemsize: raise ValueError(f"{tok} is not a {ty} literal")
    return bits.view(NP[ty])
  v = int(tok, 0)
  if kind == "f": return np.array(v, NP[ty])
  if ty == "pred": return np.array(bool(v))
  bits = 8 * np.dtype(NP[ty]).itemsize
  return np.array(v & ((1 << bits) - 1), f"u{bits // 8}").view(NP[ty])

def split_operands(rest: str) -> list[str]:
  """Operands split at the commas outside braces: `{%f0, %f1}, [%rd0+8]` -> ['{%f0, %f1}', '[%rd0+8]']."""
  out, depth, cur = [], 0, ""
  for ch in rest:
    depth += (ch == "{") - (ch == "}")
    if ch == "," and depth == 0: out.append(cur.strip()); cur = ""
    else: cur += ch
  return out + [cur.strip()] if cur.strip() else out
def vector(tok: str) -> list[str]:
  """The registers of a vector operand `{a, b, ...}`, or [tok]."""
  return [x.strip() for x in tok.strip()[1:-1].split(",")] if tok.strip().startswith("{") else [tok.strip()]

SHARED_DECL = re.compile(r"(\.extern\s+)?\.shared\s+(?:\.align\s+(\d+)\s+)?\.(\w+)\s+(\w+)\s*(?:\[(\d*)\])?\s*;")
SPECIAL = re.compile(r"%(tid|ntid|ctaid|nctaid)\.[xyz]|%laneid|%warpid")

class Decoder:
  """Turns the text of one kernel into Instrs; unknown instructions are errors naming them."""
  def __init__(self, ptx: str, name: str):
    self.name = name
    text = re.sub(r"//[^\n]*", "", ptx)
    m = re.search(r"\.entry\s+(\w+)\s*\((.*?)\)([^{]*)\{(.*)\}", text, re.S)
    if m is None: raise EmulatorError(f"NV emulator: kernel {name!r} has no .entry")
    self.entry = m.group(1)
    self.param_types = {p: t for t, p in re.findall(r"\.param\s+\.(\w+)\s+(\w+)", m.group(2))}
    self.param_order = re.findall(r"\.param\s+\.\w+\s+(\w+)", m.group(2))
    self.block_bounds(m.group(3))
    self.reg_types: dict[str, str] = {}
    body = m.group(4)
    for ty, prefix in re.findall(r"\.reg\s+\.(\w+)\s+%(\w+?)<\d+>\s*;", body): self.reg_types[prefix] = ty
    body = re.sub(r"\.reg\s+[^;]*;", "", body)
    self.layout_shared(text[:m.start()] + body)
    body = SHARED_DECL.sub("", body)
    self.instrs: list[Instr] = []
    labels: dict[str, int] = {}
    for stmt in re.split(r";|\n", body):
      stmt = stmt.strip()
      while (lm := re.match(r"(\$?\w+):\s*", stmt)):
        labels[lm.group(1)] = len(self.instrs)
        stmt = stmt[lm.end():]
      if stmt: self.instrs.append(self.decode(stmt))
    self.instrs.append(Instr("(end of kernel)", "exit", None))   # running off the end is an exit
    for ins in self.instrs:
      if ins.kind == "bra":
        if ins.label not in labels: raise EmulatorError(f"NV emulator: kernel {name}: branch to unknown label {ins.label}")
        ins.target = labels[ins.label]

  def block_bounds(self, text: str) -> None:
    """The performance directives between the parameters and the body. .maxntid (the most threads a block may have,
    per dimension) and .reqntid (exactly these) are launch constraints the hardware enforces: a launch outside them
    fails. .maxnreg and .minnctapersm only steer ptxas's register allocation: nothing to emulate. Any other is an error."""
    self.maxntid: tuple[int, ...] | None = None
    self.reqntid: tuple[int, ...] | None = None
    for d, args in re.findall(r"\.(\w+)\s*([\d\s,]*)", text):
      dims = tuple(int(x) for x in args.replace(",", " ").split())
      if d in ("maxntid", "reqntid") and 1 <= len(dims) <= 3 and min(dims) >= 1: setattr(self, d, dims + (1,) * (3 - len(dims)))
      elif d in ("maxnreg", "minnctapersm") and len(dims) == 1: pass
      else: raise EmulatorError(f"NV emulator: kernel {self.name}: unknown or malformed directive .{d} {args.strip()} before the body")
    if re.sub(r"\.(\w+)\s*([\d\s,]*)", "", text).strip(): raise EmulatorError(f"NV emulator: kernel {self.name}: cannot read {text.strip()!r} before the body")

  def layout_shared(self, text: str) -> None:
    """Shared variables at offsets in declaration order, each at its alignment; an .extern array (dynamic shared
    memory, sized at launch) after them all."""
    self.symbols: dict[str, int] = {}
    off, self.dynamic = 0, None
    for extern, align, ty, name, count in SHARED_DECL.findall(text):
      size = np.dtype(NP[ty]).itemsize if ty in NP else 0
      if not size: raise EmulatorError(f"NV emulator: kernel {self.name}: shared variable {name} has type .{ty}, which the emulator does not know")
      a = int(align or size)
      off = -(-off // a) * a
      self.symbols[name] = off
      if extern:
        if count != "": raise EmulatorError(f"NV emulator: kernel {self.name}: .extern .shared {name} must be an unsized array")
        self.dynamic = name
      else: off += size * int(count or 1)
    if self.dynamic is not None: off = self.symbols[self.dynamic]
    if off > MAX_STATIC_SHARED: raise EmulatorError(f"NV emulator: kernel {self.name} declares {off} bytes of static shared memory, more than the {MAX_STATIC_SHARED} a block may have")
    self.static_shared = off

  def rtype(self, reg: str) -> str:
    prefix = re.match(r"%([a-z]+)", reg).group(1)
    if prefix not in self.reg_types: raise EmulatorError(f"NV emulator: kernel {self.name}: register {reg} is not declared")
    return self.reg_types[prefix]

  def reader(self, tok: str, ty: str) -> Callable[[Thread], Any]:
    """A function giving operand tok's value as type ty: registers are reinterpreted (a wider one truncated, as PTX allows for
    ld/st/cvt), immediates are typed constants, %tid.x etc. are the special registers, a shared variable's name its address."""
    tok = tok.strip()
    want = NP[ty]
    if SPECIAL.fullmatch(tok): return lambda t: np.asarray(t.special[tok]).astype(want)
    if tok in self.symbols:
      c = np.array(self.symbols[tok]).astype(want)
      return lambda t: c
    if tok.startswith("%"):
      have = NP[self.rtype(tok)]
      if have == want: return lambda t: t.regs.get(tok, np.zeros(t.n, have))
      hs, ws = np.dtype(have).itemsize, np.dtype(want).itemsize
      if hs == ws: return lambda t: t.regs.get(tok, np.zeros(t.n, have)).view(want)
      if hs > ws:
        narrow = np.dtype(f"u{ws}")
        return lambda t: t.regs.get(tok, np.zeros(t.n, have)).astype(narrow).view(want)
      raise EmulatorError(f"NV emulator: kernel {self.name}: register {tok} ({self.rtype(tok)}) is narrower than {ty}")
    try: c = parse_imm(tok, ty)
    except ValueError: raise EmulatorError(f"NV emulator: kernel {self.name}: bad operand {tok!r}") from None
    return lambda t: c

  def address(self, tok: str) -> Callable[[Thread], np.ndarray]:
    """An address operand [reg], [reg+imm], [name], [name+imm] or [imm] -> each lane's address (uint64); a 32-bit
    register holds a shared-memory address, zero-extended."""
    m = re.fullmatch(r"\[\s*([%\w$.]+?)\s*(?:\+\s*(-?\w+))?\s*\]", tok.strip())
    if m is None: raise EmulatorError(f"NV emulator: kernel {self.name}: bad address {tok!r}")
    base, off = m.group(1), np.uint64(int(m.group(2) or "0", 0) & (2**64 - 1))
    if base.startswith("%"):
      ty = self.rtype(base) if not SPECIAL.fullmatch(base) else "u32"
      rd = self.reader(base, ty if np.dtype(NP[ty]).itemsize == 8 else "u32")
      return lambda t: np.asarray(rd(t)).astype(np.uint64) + off
    const = np.uint64(self.symbols[base] if base in self.symbols else int(base, 0)) + off
    return lambda t: const

  def writer(self, tok: str, ty: str) -> Callable[[Thread, Any], None]:
    """A function storing a value of type ty into register tok: widened by ty's signedness when the register is wider."""
    have = NP[self.rtype(tok)]
    hs, ws = np.dtype(have).itemsize, np.dtype(NP[ty]).itemsize
    signed = ty.startswith("s")
    def write(t: Thread, v) -> None:
      v = np.asarray(v)
      if v.dtype != NP[ty]: v = v.astype(NP[ty])
      if hs != ws: v = v.astype(f"i{hs}" if signed else f"u{hs}")
      v = v.view(have) if v.dtype != have and v.dtype.itemsize == hs else v.astype(have)
      if v.ndim == 0 or v.shape[0] != t.n: v = np.broadcast_to(v, (t.n,))
      if t.mask is None: t.regs[tok] = np.array(v)
      else: t.regs[tok] = np.where(t.mask, v, t.regs.get(tok, np.zeros(t.n, have)))
    if hs < ws: raise EmulatorError(f"NV emulator: kernel {self.name}: register {tok} is narrower than {ty}")
    return write

  def decode(self, stmt: str) -> Instr:
    guard = None
    if (gm := re.match(r"@(!?)(%\w+)\s+", stmt)):
      guard, stmt = (gm.group(2), gm.group(1) == "!"), stmt[gm.end():]
    opcode, _, rest = stmt.partition(" ")
    ops = split_operands(rest)
    parts = opcode.split(".")
    if parts[0] == "bra": return Instr(stmt, "bra", guard, label=ops[0])
    if parts[0] in ("exit", "ret"): return Instr(stmt, "exit", guard)
    if parts[0] in ("bar", "barrier") and "warp" not in parts: return self.barrier(stmt, guard, parts[1:], ops)
    if parts[0] not in OPS: raise EmulatorError(f"NV emulator: kernel {self.name}: instruction {parts[0]!r} is not implemented ({stmt})")
    fn, known = OPS[parts[0]]
    if known is not None and (unknown := [m for m in parts[1:] if m not in known and m not in TYPES]):
      raise EmulatorError(f"NV emulator: kernel {self.name}: modifier .{unknown[0]} of {parts[0]} is not implemented ({stmt})")
    try: run = fn(self, parts[1:], ops)
    except EmulatorError: raise
    except Exception as e: raise EmulatorError(f"NV emulator: kernel {self.name}: cannot decode {stmt!r}: {type(e).__name__}: {e}") from e
    return Instr(stmt, "op", guard, run)

  def barrier(self, stmt: str, guard, mods: list[str], ops: list[str]) -> Instr:
    """bar.sync a / barrier.sync.aligned a (aligned: the whole warp executes this instruction) and barrier.sync a (not
    aligned), with every thread of the block taking part; a thread count, .arrive and .red are not implemented."""
    kind = [m for m in mods if m != "cta"]
    if kind not in (["sync"], ["sync", "aligned"]) or len(ops) != 1:
      raise EmulatorError(f"NV emulator: kernel {self.name}: {stmt!r} is not implemented (only bar.sync / barrier.sync with a barrier number)")
    return Instr(stmt, "bar", guard, barrier=self.reader(ops[0], "u32"), aligned=stmt.startswith("bar.") or "aligned" in kind)

# ***** instruction semantics: each builder gets the decoder, the opcode's modifiers and the operands, returns run(thread) *****
# Each instruction does what the PTX ISA (9.1, chapter 9.7) defines, not what the core's definition wants: the renderer is
# what makes the two agree. Where the ISA leaves a result unspecified the emulator gives what NVIDIA GPUs were measured to
# give (tests/data/*.json), else a value that differs from the core's definition, so a kernel relying on it fails here too.

TYPES = set(NP)
def types_of(mods: list[str]) -> list[str]: return [m for m in mods if m in TYPES]

F32_TINY = np.float32(2.0**-126)                      # the smallest normal f32: below it .ftz flushes
CANONICAL_NAN = np.uint32(0x7FFFFFFF).view(np.float32)
# a float->float cvt's NaN result is canonical too: on an H100 float16 NaNs of every payload and sign came back 0x7fff
# through cvt.f32.f16 and cvt.rn.f16.f32 (the GPU proof's conformance run, specials section)
CVT_NAN = {"f16": np.uint16(0x7fff).view(np.float16), "f32": CANONICAL_NAN, "f64": np.uint64(0x7fffffffffffffff).view(np.float64)}

def flush(x: np.ndarray) -> np.ndarray:
  """.ftz: f32 subnormals become the zero of their sign."""
  return np.where(np.abs(x) < F32_TINY, np.copysign(np.float32(0), x), x).astype(np.float32)

def float_op(fn: Callable, ty: str, mods: list[str]) -> Callable:
  """fn over float operands with the instruction's modifiers: .ftz flushes f32 subnormal inputs and results, .sat clamps the
  result to [0, 1] with NaN -> +0. An f32 NaN result is the canonical NaN 0x7fffffff (the ISA: single precision returns an
  unspecified NaN), an f64 NaN keeps its payload (the ISA supports double-precision payloads)."""
  ftz, sat = "ftz" in mods, "sat" in mods
  if ftz and ty != "f32": raise EmulatorError(f"NV emulator: .ftz applies to .f32 only, not .{ty}")
  def run(*xs):
    with np.errstate(all="ignore"):
      if ftz: xs = tuple(flush(x) for x in xs)
      r = np.asarray(fn(*xs))
      if ftz: r = flush(r)
      if sat: r = np.where(np.isnan(r), 0, np.clip(r, 0, 1)).astype(r.dtype)
    return np.where(np.isnan(r), CANONICAL_NAN, r) if ty == "f32" else r
  return run

def needs(mods: list[str], rnd: str, what: str) -> None:
  if rnd not in mods: raise EmulatorError(f"NV emulator: {what} needs the .{rnd} rounding modifier (other roundings are not implemented)")

def _unary(fn):   # fn(a, ty, mods)
  def build(d: Decoder, mods, ops):
    ty = types_of(mods)[-1]
    a, out = d.reader(ops[1], ty), d.writer(ops[0], ty)
    return lambda t: out(t, fn(a(t), ty, mods))
  return build

def _binary(fn):   # fn(a, b, ty, mods)
  def build(d: Decoder, mods, ops):
    ty = types_of(mods)[-1]
    a, b, out = d.reader(ops[1], ty), d.reader(ops[2], ty), d.writer(ops[0], ty)
    def run(t):
      with np.errstate(all="ignore"): out(t, fn(a(t), b(t), ty, mods))
    return run
  return build

def _arith(float_fn, int_fn=None, rnd: str | None = None):
  """An instruction on floats (float_fn, through float_op; rnd: the rounding modifier it must carry) and integers (int_fn,
  wrapping in the type; None: floats only)."""
  def fn(a, b, ty, mods):
    if ty[0] == "f":
      if rnd: needs(mods, rnd, f"{ty} arithmetic")
      return float_op(float_fn, ty, mods)(a, b)
    if int_fn is None or "sat" in mods: raise EmulatorError(f"NV emulator: {'.'.join(mods)} is not implemented")
    return int_fn(a, b, ty, mods)
  return fn

def _int_div(a, b, ty, mods):
  """Truncating division. By zero the ISA gives "an unspecified, machine-specific value": here all bits set (never the
  core's 0); MIN / -1 wraps."""
  zero = b == 0
  bs = np.where(zero, 1, b).astype(a.dtype)
  q = np.floor_divide(a, bs)
  q = np.where((a - q * bs != 0) & ((a < 0) != (bs < 0)), q + 1, q).astype(a.dtype)
  return np.where(zero, ~np.zeros_like(a), q)

def _int_rem(a, b, ty, mods):
  """The remainder of the truncating division (NVIDIA's sign rule: the dividend's); by zero unspecified: here a itself."""
  if ty[0] == "f": raise EmulatorError(f"NV emulator: rem.{ty} does not exist")
  bs = np.where(b == 0, 1, b).astype(a.dtype)
  return np.where(b == 0, a, (a - _int_div(a, bs, ty, mods) * bs).astype(a.dtype))

def _mul_int(a, b, ty, mods):
  if "wide" in mods:
    wide = {"s32": np.int64, "u32": np.uint64, "s16": np.int32, "u16": np.uint32}[ty]
    return a.astype(wide) * b.astype(wide)
  if "lo" not in mods: raise EmulatorError(f"NV emulator: mul.{'.'.join(mods)} (only .lo and .wide on integers) is not implemented")
  return a * b

def _shift(left: bool):
  def fn(a, n, ty, mods):
    bits = 8 * a.dtype.itemsize
    n = np.asarray(n).astype(np.uint64)
    big = n >= bits   # the ISA: shift amounts past the register width are clamped to the width
    m = np.minimum(n, bits - 1).astype(a.dtype)
    if left: return np.where(big, 0, np.left_shift(a, m)).astype(a.dtype)
    r = np.right_shift(a, m)
    return np.where(big, np.where(a < 0, -1, 0) if ty.startswith("s") else 0, r).astype(a.dtype)
  return fn

def _build_shift(left: bool):
  sh = _shift(left)
  def build(d, mods, ops):
    ty = types_of(mods)[-1]
    a, n, out = d.reader(ops[1], ty), d.reader(ops[2], "u32"), d.writer(ops[0], ty)
    def run(t): out(t, sh(a(t), n(t), ty, mods))
    return run
  return build

def _mov(d, mods, ops):
  """mov (a register, immediate, special register or a shared variable's address), and the packing forms
  mov.b32 d, {lo, hi} / mov.b32 {lo, hi}, a (and .b64): the first element is the low bits."""
  ty = types_of(mods)[-1]
  if ops[0].startswith("{") or ops[1].startswith("{"):
    packed, parts = (ops[1], ops[0]) if ops[0].startswith("{") else (ops[0], ops[1])
    names, bits = vector(parts), 8 * np.dtype(NP[ty]).itemsize
    pty = f"b{bits // len(names)}"
    if ops[0].startswith("{"):   # unpack
      src, outs = d.reader(packed, ty), [d.writer(x, pty) for x in names]
      def unpack(t):
        v = np.asarray(src(t)).astype(np.uint64)
        for i, w in enumerate(outs): w(t, (v >> np.uint64(i * bits // len(names))).astype(NP[pty]))
      return unpack
    srcs, out = [d.reader(x, pty) for x in names], d.writer(packed, ty)
    def pack(t):
      v = np.zeros((), np.uint64)
      for i, r in enumerate(srcs): v = v | (np.asarray(r(t)).astype(np.uint64) << np.uint64(i * bits // len(names)))
      out(t, v.astype(NP[ty]))
    return pack
  src, out = d.reader(ops[1], ty), d.writer(ops[0], ty)
  return lambda t: out(t, src(t))

def _cvta(d, mods, ops):
  """Address conversions: global addresses are the same in both spaces; a shared address is SHARED_WINDOW above its offset."""
  ty = types_of(mods)[-1]
  space = next((m for m in mods if m in ("global", "shared", "local", "const", "param")), None)
  if space == "global": return _mov(d, [ty], ops)
  if space != "shared" or ty != "u64": raise EmulatorError(f"NV emulator: cvta.{'.'.join(mods)} is not implemented")
  src, out = d.reader(ops[1], ty), d.writer(ops[0], ty)
  if "to" not in mods: return lambda t: out(t, src(t) + np.uint64(SHARED_WINDOW))
  def to_shared(t):
    a = np.asarray(src(t))
    if np.any((a < np.uint64(SHARED_WINDOW)) & (t.active() if a.ndim else True)):
      raise EmulatorError(f"NV emulator: kernel {d.name}: cvta.to.shared of an address outside the shared window")
    out(t, a - np.uint64(SHARED_WINDOW))
  return to_shared

def _fused(d, mods, ops):
  """mad.lo on integers (wrapping); fma.rn / mad.rn on floats: a * b + c rounded once (tinycore.dtype.fma), with .ftz and
  .sat as float_op applies them."""
  ty = types_of(mods)[-1]
  a, b, c, out = d.reader(ops[1], ty), d.reader(ops[2], ty), d.reader(ops[3], ty), d.writer(ops[0], ty)
  if ty[0] == "f":
    needs(mods, "rn", f"fma/mad.{ty}")
    fn = float_op(lambda x, y, z: fma(*np.broadcast_arrays(x, y, z)), ty, mods)
    return lambda t: out(t, fn(a(t), b(t), c(t)))
  if "lo" not in mods or "sat" in mods: raise EmulatorError(f"NV emulator: mad.{'.'.join(mods)} (only .lo on integers) is not implemented")
  def run(t):
    with np.errstate(all="ignore"): out(t, a(t) * b(t) + c(t))
  return run

CMP = {"eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal,
       "lo": np.less, "ls": np.less_equal, "hi": np.greater, "hs": np.greater_equal}
SETP_CMPS = set(CMP) | {c + "u" for c in ("eq", "ne", "lt", "le", "gt", "ge")} | {"num", "nan"}
def _setp(d, mods, ops):
  ty = types_of(mods)[-1]
  cmp = mods[0]
  if cmp not in SETP_CMPS: raise EmulatorError(f"NV emulator: setp.{cmp} is not implemented")
  if "ftz" in mods and ty != "f32": raise EmulatorError(f"NV emulator: .ftz applies to .f32 only, not .{ty}")
  boolop = next((m for m in mods[1:] if m in ("and", "or", "xor")), None)
  a, b = d.reader(ops[1], ty), d.reader(ops[2], ty)
  c = d.reader(ops[3].lstrip("!"), "pred") if boolop else None
  neg_c = boolop is not None and ops[3].startswith("!")
  out = d.writer(ops[0], "pred")
  def compare(x, y):
    if "ftz" in mods: x, y = flush(x), flush(y)
    if cmp == "nan": return np.isnan(x) | np.isnan(y)
    if cmp == "num": return ~(np.isnan(x) | np.isnan(y))
    if cmp not in CMP: return CMP[cmp[:-1]](x, y) | np.isnan(x) | np.isnan(y)   # unordered forms: true when either is NaN
    return CMP[cmp](x, y)   # ordered: NaN compares false (ne included)
  def run(t):
    with np.errstate(invalid="ignore"): p = compare(a(t), b(t))
    if boolop:
      q = c(t)
      q = ~q if neg_c else q
      p = {"and": np.logical_and, "or": np.logical_or, "xor": np.logical_xor}[boolop](p, q)
    out(t, p)
  return run

def _selp(d, mods, ops):
  ty = types_of(mods)[-1]
  a, b, p, out = d.reader(ops[1], ty), d.reader(ops[2], ty), d.reader(ops[3], "pred"), d.writer(ops[0], ty)
  return lambda t: out(t, np.where(p(t), a(t), b(t)))

def _logic(fn):
  def build(d, mods, ops):
    ty = types_of(mods)[-1]
    srcs, out = [d.reader(o, ty) for o in ops[1:]], d.writer(ops[0], ty)
    return lambda t: out(t, fn(*[s(t) for s in srcs]))
  return build

def _bfe(d, mods, ops):
  """The ISA's bfe: len bits of a from bit pos (both taken & 0xff), padded with the field's sign bit (0 for unsigned types
  and for len 0); past the msb of a the field is all sign bit."""
  ty = types_of(mods)[-1]
  if ty not in ("u32", "u64", "s32", "s64"): raise EmulatorError(f"NV emulator: bfe.{ty} does not exist")
  a, pos, ln, out = d.reader(ops[1], ty), d.reader(ops[2], "u32"), d.reader(ops[3], "u32"), d.writer(ops[0], ty)
  bits, one = 8 * np.dtype(NP[ty]).itemsize, np.uint64(1)
  ones = np.uint64(2**bits - 1)
  def run(t):
    x = np.asarray(a(t)).view(f"u{bits // 8}").astype(np.uint64)
    p, n = (np.asarray(pos(t)) & 0xff).astype(np.uint64), (np.asarray(ln(t)) & 0xff).astype(np.uint64)
    take = np.minimum(n, np.uint64(bits) - np.minimum(p, np.uint64(bits)))   # bits that come from a
    mask = np.where(take >= 64, ~np.uint64(0), (one << np.minimum(take, np.uint64(63))) - one)
    field = (x >> np.minimum(p, np.uint64(63))) & mask
    if ty[0] == "s":
      sbit = (x >> np.minimum(p + n - one, np.uint64(bits - 1))) & one
      field = np.where((n > 0) & (sbit == one), field | (~mask & ones), field)
    out(t, field.astype(f"u{bits // 8}").view(NP[ty]))
  return run

def _bfi(d, mods, ops):
  """The ISA's bfi: b with len bits from bit pos (both taken & 0xff) replaced by a's low bits; those past b's msb are not
  inserted (len 0 or pos past the msb: b)."""
  ty = types_of(mods)[-1]
  if ty not in ("b32", "b64"): raise EmulatorError(f"NV emulator: bfi.{ty} does not exist")
  a, b, pos, ln, out = d.reader(ops[1], ty), d.reader(ops[2], ty), d.reader(ops[3], "u32"), d.reader(ops[4], "u32"), d.writer(ops[0], ty)
  bits, one = 8 * np.dtype(NP[ty]).itemsize, np.uint64(1)
  def run(t):
    x, y = (np.asarray(r(t)).astype(np.uint64) for r in (a, b))
    p, n = (np.asarray(pos(t)) & 0xff).astype(np.uint64), (np.asarray(ln(t)) & 0xff).astype(np.uint64)
    take = np.minimum(n, np.uint64(bits) - np.minimum(p, np.uint64(bits)))   # bits that fit below the msb
    mask = np.where(take >= 64, ~np.uint64(0), (one << np.minimum(take, np.uint64(63))) - one) << np.minimum(p, np.uint64(63))
    out(t, ((y & ~mask) | ((x << np.minimum(p, np.uint64(63))) & mask)).astype(NP[ty]))
  return run

INT_ROUNDINGS = {"rzi": np.trunc, "rni": np.rint, "rmi": np.floor, "rpi": np.ceil}

def float_to_int(x: np.ndarray, at: str, dt: str) -> np.ndarray:
  """An integral float value as integer type dt, clamped to its range (the ISA: float-to-int conversions saturate). NaN
  gives 0, except from an .f64 or into a 64-bit integer, where it gives 1 << (bits - 1) (the ISA's Integer Notes; the
  H100's results, tests/data/h100_cvt_rzi.json)."""
  info, x = np.iinfo(NP[dt]), np.asarray(x, np.float64)
  nan, over, under = np.isnan(x), x >= float(info.max), x <= float(info.min)
  out = np.where(over, NP[dt](info.max), np.where(under, NP[dt](info.min), np.where(over | under | nan, 0, x).astype(NP[dt])))
  if at == "f64" or info.bits == 64:
    out = np.where(nan, np.array(1 << (info.bits - 1), f"u{info.bits // 8}").view(NP[dt]), out)
  return out.astype(NP[dt])

def _cvt(d, mods, ops):
  """cvt between the types the ISA lists: float->int with an integer rounding (saturating), float->float (rounding to an
  integral value, or to a narrower type with .rn), int->float with .rn, int->int (truncated or extended); .ftz and .sat
  as the ISA defines them for float results."""
  dt, at = types_of(mods)[-2:]
  rnd = next((m for m in mods if m in INT_ROUNDINGS or m == "rn"), None)
  a, out = d.reader(ops[1], at), d.writer(ops[0], dt)
  fa, fd = at[0] == "f", dt[0] == "f"
  ftz_in = "ftz" in mods and at == "f32"
  if "ftz" in mods and "f32" not in (at, dt): raise EmulatorError(f"NV emulator: cvt.ftz needs an .f32 source or destination, not cvt.{dt}.{at}")
  if fa and not fd:
    if rnd not in INT_ROUNDINGS: raise EmulatorError(f"NV emulator: cvt.{dt}.{at} needs an integer rounding modifier (.rni .rzi .rmi .rpi)")
    r = INT_ROUNDINGS[rnd]
    def run(t):
      x = a(t)
      with np.errstate(invalid="ignore"): out(t, float_to_int(r((flush(x) if ftz_in else x).astype(np.float64)), at, dt))
    return run
  if not fa and not fd:
    if rnd is not None or "sat" in mods: raise EmulatorError(f"NV emulator: cvt.{'.'.join(mods)} between integers takes no rounding (.sat is not implemented)")
    return lambda t: out(t, a(t).astype(NP[dt]))   # truncated, or extended by the source's signedness
  if fa and at == dt:   # rounded to an integral value in the same type
    if rnd not in INT_ROUNDINGS: raise EmulatorError(f"NV emulator: cvt.{dt}.{at} rounds to an integral value: it needs .rni .rzi .rmi or .rpi")
    fn = float_op(INT_ROUNDINGS[rnd], dt, mods)
    return lambda t: out(t, fn(a(t)))
  narrowing = not fa or np.dtype(NP[dt]).itemsize < np.dtype(NP[at]).itemsize
  if narrowing and rnd != "rn": raise EmulatorError(f"NV emulator: cvt.{dt}.{at} needs the .rn rounding modifier (.rz .rm .rp are not implemented)")
  if not narrowing and rnd is not None: raise EmulatorError(f"NV emulator: cvt.{dt}.{at} is exact and takes no rounding modifier")
  def conv(t):   # narrowing and int->float round to nearest even (numpy's conversions), widening is exact
    x = a(t)
    with np.errstate(all="ignore"):
      r = (flush(x) if ftz_in else x).astype(NP[dt])
      if "ftz" in mods and dt == "f32": r = flush(r)
      if "sat" in mods: r = np.where(np.isnan(r), 0, np.clip(r, 0, 1)).astype(NP[dt])
    if fa: r = np.where(np.isnan(r), CVT_NAN[dt], r)
    out(t, r)
  return conv

SPACES = ("global", "shared", "param", "local", "const")
def _space(mods, what: str) -> str:
  space = next((m.split("::")[0] for m in mods if m.split("::")[0] in SPACES), "generic")
  if space in ("local", "const"): raise EmulatorError(f"NV emulator: {what}.{space} is not implemented")
  return space
def _vec(mods, ty: str) -> int:
  """The elements of an ld/st's vector: .v2 or .v4 of at most 128 bits (the ISA's vectors; .v8, and 256 bits, came with
  PTX 8.8 for sm_100, which the kernels here do not target)."""
  vec = next((int(m[1:]) for m in mods if m in ("v2", "v4", "v8")), 1)
  if vec > 4 or vec * np.dtype(NP[ty]).itemsize > 16: raise EmulatorError(f"NV emulator: .v{vec}.{ty} is not a PTX vector (.v2 and .v4 of at most 128 bits)")
  return vec

def _ld(d, mods, ops):
  """ld.{param,global,shared,generic}{.nc}{.v2,.v4}.type: a vector access must be aligned to its whole size."""
  ty = types_of(mods)[-1]
  space, vec = _space(mods, "ld"), _vec(mods, ty)
  outs = [d.writer(x, ty) for x in vector(ops[0])]
  if len(outs) != vec: raise EmulatorError(f"NV emulator: ld with {'.v%d' % vec if vec > 1 else 'one element'} writes {len(outs)} registers")
  if space == "param":
    name = ops[1].strip("[] ")
    return lambda t: outs[0](t, np.asarray(t.params[name]).astype(NP[ty]))
  addr = d.address(ops[1])
  def run(t):
    lanes = t.mask
    a = np.broadcast_to(addr(t), (t.n,))
    if lanes is not None:
      if not lanes.any(): return
      vals = np.zeros((t.n, vec), NP[ty])
      vals[lanes] = t.load(space, a[lanes], lanes, ty, vec)
    else: vals = t.load(space, a, None, ty, vec)
    for i, out in enumerate(outs): out(t, vals[:, i])
  return run

def _st(d, mods, ops):
  ty = types_of(mods)[-1]
  space, vec = _space(mods, "st"), _vec(mods, ty)
  if space == "param": raise EmulatorError("NV emulator: st.param is not implemented")
  addr, srcs = d.address(ops[0]), [d.reader(x, ty) for x in vector(ops[1])]
  if len(srcs) != vec: raise EmulatorError(f"NV emulator: st with {'.v%d' % vec if vec > 1 else 'one element'} reads {len(srcs)} registers")
  def run(t):
    lanes = t.mask
    a = np.broadcast_to(addr(t), (t.n,))
    vals = np.stack([np.broadcast_to(s(t), (t.n,)) for s in srcs], axis=1)
    if lanes is not None:
      if not lanes.any(): return
      a, vals = a[lanes], vals[lanes]
    t.store(space, a, lanes, ty, vals)
  return run

def _cp_async(d, mods, ops):
  """cp.async.{ca,cg}.shared.global [dst], [src], cp-size{, src-size} (sm_80+): each thread copies cp-size bytes (4, 8
  or 16; .cg only 16), both addresses aligned to it, from global to shared memory without a register, the bytes past
  src-size zero. The PTX ISA makes the copy asynchronous: its data is in shared memory only once the thread waits for
  its copies (cp.async.wait_all here; a bar.sync does not), so until then any access to those bytes is an error. The
  source is read at issue (a kernel writing it before the wait would race on the hardware). cp.async.wait_all: the
  executing threads' copies land. commit_group/wait_group, the .L2 qualifiers and mbarrier completion are not
  implemented."""
  if mods == ["async", "wait_all"]:
    def wait(t):
      keys, left = t.key(t.mask), []
      for who, at, data in t.pending:
        mine = np.isin(who, keys)
        if mine.any():
          t.shared.reshape(-1)[at[mine]] = data[mine]
          t.inflight.reshape(-1)[at[mine]] = False
        if not mine.all(): left.append((who[~mine], at[~mine], data[~mine]))
      t.pending = left
    return wait
  if len(mods) != 4 or mods[0] != "async" or mods[1] not in ("ca", "cg") or mods[2:] != ["shared", "global"] or len(ops) not in (3, 4):
    raise EmulatorError(f"NV emulator: kernel {d.name}: cp.{'.'.join(mods)} is not implemented (cp.async.ca/cg.shared.global [dst], [src], "
                        f"cp-size{{, src-size}} and cp.async.wait_all)")
  size = int(ops[2], 0)
  if size not in ((16,) if mods[1] == "cg" else (4, 8, 16)):
    raise EmulatorError(f"NV emulator: kernel {d.name}: cp.async.{mods[1]} copies {'16' if mods[1] == 'cg' else '4, 8 or 16'} bytes, not {size}")
  dst, src = d.address(ops[0]), d.address(ops[1])
  src_size = d.reader(ops[3], "u32") if len(ops) == 4 else None
  def run(t):
    lanes = t.mask
    if lanes is not None and not lanes.any(): return
    sel = slice(None) if lanes is None else lanes
    offs = np.broadcast_to(dst(t), (t.n,))[sel].astype(np.int64)
    view, idx = t.memory.elements(np.broadcast_to(src(t), (t.n,))[sel], "b32", "cp.async read", size // 4)
    data = view[idx[:, None] + np.arange(size // 4)].view(np.uint8).reshape(-1, size).copy()
    if src_size is not None:
      n = np.broadcast_to(np.asarray(src_size(t)), (t.n,))[sel].astype(np.int64)[:, None]
      if np.any(n > size): raise EmulatorError(f"NV emulator: kernel {d.name}: cp.async src-size past its cp-size of {size}")
      data[np.arange(size) >= n] = 0
    # also: not onto bytes in flight, nor words another warp accessed since the last barrier (Thread.ordered)
    at = t.shared_index(offs, lanes, size, "cp.async write")[:, None] * size + np.arange(size)
    t.count("global_read", lanes, size)
    t.count_sectors(lanes, idx, 4)
    t.count("shared_written", lanes, size)
    t.shared_access(offs, lanes, size)
    if t.inflight is None: t.inflight = np.zeros(t.shared.shape, bool)
    t.inflight.reshape(-1)[at] = True
    t.pending.append((t.key(lanes), at, data))
  return run

# ***** warp-wide instructions: the lanes of each warp gathered through Thread.table() *****

def _warp_lanes(t: Thread, what: str) -> np.ndarray:
  """(warps, 32) lane indices of the warps executing a .sync.aligned warp instruction: each must be whole (no thread
  exited or elsewhere) and converged, else an error naming a thread that is missing."""
  act = t.active()
  warps = np.unique(t.warp[act])
  lanes = t.table()[warps]
  ok = (lanes >= 0) & act[np.maximum(lanes, 0)]
  if not ok.all():
    w, k = (int(x[0]) for x in np.nonzero(~ok))
    present = int(lanes[w][ok[w]][0])
    raise EmulatorError(f"NV emulator: {what} needs all 32 threads of a warp, converged; lane {k} of the warp of {t.who(present)} "
                        f"{'has exited or does not exist' if lanes[w, k] < 0 else 'is not executing it'}")
  return lanes

def _shfl(d, mods, ops):
  """shfl.sync.{up,down,bfly,idx}.b32 d[|p], a, b, c, membermask: the PTX ISA's semantics (source lane j from the
  mode, b and c's clamp/segment mask; out of range: the thread's own a). The executing thread must be in membermask,
  every non-exited thread named there must execute it, and a source thread must be executing it: else an error."""
  mode = next((m for m in mods if m in ("up", "down", "bfly", "idx")), None)
  if "sync" not in mods or mode is None or mods[-1] != "b32": raise EmulatorError(f"NV emulator: shfl.{'.'.join(mods)} is not implemented (shfl.sync.mode.b32)")
  dst, _, pred = ops[0].partition("|")
  out, pout = d.writer(dst.strip(), "b32"), (d.writer(pred.strip(), "pred") if pred else None)
  a, b, c, mm = (d.reader(o, "u32") for o in ops[1:5])
  def run(t):
    act, lane = t.active(), (t.tid % WARP).astype(np.int64)
    bval, cval = np.asarray(b(t)).astype(np.int64) & 31, np.asarray(c(t)).astype(np.int64) & 31
    seg = np.asarray(c(t)).astype(np.int64) >> 8 & 31
    maxlane, minlane = (lane & seg) | (cval & ~seg), lane & seg
    j = {"up": lane - bval, "down": lane + bval, "bfly": lane ^ bval, "idx": minlane | (bval & ~seg)}[mode]
    inrange = j >= maxlane if mode == "up" else j <= maxlane
    j = np.where(inrange, j, lane)
    table = t.table()
    mask = np.broadcast_to(np.asarray(mm(t)).astype(np.int64), (t.n,))
    named = (mask[:, None] >> np.arange(WARP)) & 1 == 1
    idx = table[t.warp]
    src = table[t.warp, j]
    for bad, why in ((act & ~named[np.arange(t.n), lane], "is not in membermask"),
                     (act & (named & (idx >= 0) & ~act[np.maximum(idx, 0)]).any(axis=1), "names in membermask a thread that is not executing it"),
                     (act & ((src < 0) | ~act[np.maximum(src, 0)]), "reads a source lane that is not executing it (or has exited)")):
      if bad.any():
        k = int(np.flatnonzero(bad)[0])
        raise EmulatorError(f"NV emulator: kernel {d.name}: shfl.sync.{mode} by {t.who(k)} (lane {lane[k]}, membermask {int(mask[k]):#x}, "
                            f"source lane {j[k]}) {why}")
    vals = np.broadcast_to(a(t), (t.n,))
    out(t, vals[np.maximum(src, 0)])
    if pout is not None: pout(t, inrange)
  return run

def _bar_warp(d, mods, ops):
  """bar.warp.sync membermask: every non-exited thread named in membermask must execute it."""
  if mods != ["warp", "sync"]: raise EmulatorError(f"NV emulator: bar.{'.'.join(mods)} is not implemented")
  mm = d.reader(ops[0], "u32")
  def run(t):
    act, lane = t.active(), t.tid % WARP
    mask = np.broadcast_to(np.asarray(mm(t)).astype(np.int64), (t.n,))
    idx = t.table()[t.warp]
    named = (mask[:, None] >> np.arange(WARP)) & 1 == 1
    bad = act & (~named[np.arange(t.n), lane] | (named & (idx >= 0) & ~act[np.maximum(idx, 0)]).any(axis=1))
    if bad.any(): raise EmulatorError(f"NV emulator: kernel {d.name}: bar.warp.sync by {t.who(int(np.flatnonzero(bad)[0]))}: a thread named in membermask is not executing it")
  return run

# the fragment layouts of the PTX ISA ("Matrix Fragments for mma.m16n8k16 with floating point type", "for mma.m16n8k8"
# .tf32): element i of lane l, with g = l >> 2 and q = l % 4, is matrix element (row, col)
MMA_FRAGMENT: dict[tuple[str, str], Callable] = {
  ("m16n8k16", "a"): lambda g, q, i: (g + 8 * ((i >> 1) & 1), 2 * q + (i & 1) + 8 * (i >> 2)),   # 8 f16/bf16 in 4 registers
  ("m16n8k16", "b"): lambda g, q, i: (2 * q + (i & 1) + 8 * (i >> 1), g),                        # 4 f16/bf16 in 2 registers
  ("m16n8k8", "a"): lambda g, q, i: (g + 8 * (i & 1), q + 4 * (i >> 1)),                         # 4 tf32, one per register
  ("m16n8k8", "b"): lambda g, q, i: (q + 4 * i, g),                                              # 2 tf32
  ("c", "c"): lambda g, q, i: (g + 8 * (i >> 1), 2 * q + (i & 1)),                                # 4 f32 accumulators
}
MMA_FORMS = {("m16n8k16", "f16"): 16, ("m16n8k16", "bf16"): 16, ("m16n8k8", "tf32"): 8}   # (shape, input type) -> K

def fragment_index(kind: tuple[str, str], count: int) -> tuple[np.ndarray, np.ndarray]:
  """(rows, cols) of shape (32, count): where each lane's fragment elements sit in the matrix."""
  l, i = np.arange(WARP)[:, None], np.arange(count)[None, :]
  return tuple(np.broadcast_to(x, (WARP, count)) for x in MMA_FRAGMENT[kind](l >> 2, l & 3, i))

def _unpack(regs: list[np.ndarray], ty: str) -> np.ndarray:
  """(..., registers) b32 words -> (..., elements) float64 values: two f16/bf16 per word (low half first), or one tf32
  (an f32 whose low 13 bits the tensor core does not read)."""
  w = np.stack(regs, axis=-1).astype(np.uint32)
  if ty == "tf32": return (w & np.uint32(0xffffe000)).view(np.float32).astype(np.float64)
  halves = np.stack([w & 0xffff, w >> 16], axis=-1).reshape(*w.shape[:-1], -1).astype(np.uint16)
  if ty == "f16": return halves.view(np.float16).astype(np.float64)
  return (halves.astype(np.uint32) << 16).view(np.float32).astype(np.float64)

def _mma(d, mods, ops):
  """mma.sync.aligned.{m16n8k16,m16n8k8}.row.col.f32.{f16,bf16,tf32}.{same}.f32 d, a, b, c: D = A B + C for each warp,
  its operands spread over the lanes as the PTX ISA's fragment tables say; the sums as mma_dot models the tensor core."""
  shape, layouts, types = mods[2] if len(mods) > 2 else "", mods[3:5], mods[5:]
  if mods[:2] != ["sync", "aligned"] or layouts != ["row", "col"] or len(types) != 4 or types[0] != "f32" or types[3] != "f32" or \
     types[1] != types[2] or (shape, types[1]) not in MMA_FORMS:
    raise EmulatorError(f"NV emulator: mma.{'.'.join(mods)} is not implemented (m16n8k16 .f16/.bf16 and m16n8k8 .tf32, .row.col, f32 accumulators)")
  ty, K = types[1], MMA_FORMS[(shape, types[1])]
  per = 1 if ty == "tf32" else 2   # elements per register
  dregs, aregs, bregs, cregs = (vector(o) for o in ops)
  if (len(dregs), len(aregs), len(bregs), len(cregs)) != (4, 16 * K // 32 // per, 8 * K // 32 // per, 4):
    raise EmulatorError(f"NV emulator: mma.{shape}.{ty}: wrong number of registers in {ops}")
  outs = [d.writer(x, "f32") for x in dregs]
  ra, rb, rc = ([d.reader(x, t) for x in regs] for regs, t in ((aregs, "b32"), (bregs, "b32"), (cregs, "f32")))
  (ar, ac), (br, bc), (cr, cc) = fragment_index((shape, "a"), 16 * K // 32), fragment_index((shape, "b"), 8 * K // 32), fragment_index(("c", "c"), 4)
  def run(t):
    lanes = _warp_lanes(t, f"mma.sync.aligned.{shape}")
    W, w = lanes.shape[0], np.arange(lanes.shape[0])[:, None, None]
    gather = lambda readers: [np.broadcast_to(r(t), (t.n,))[lanes] for r in readers]   # each (W, 32)
    A, B, C = np.zeros((W, 16, K)), np.zeros((W, K, 8)), np.zeros((W, 16, 8), np.float32)
    A[w, ar, ac] = _unpack(gather(ra), ty)
    B[w, br, bc] = _unpack(gather(rb), ty)
    C[w, cr, cc] = np.stack(gather(rc), axis=-1)
    D = mma_dot(A, B, C, ty)
    res = [np.zeros(t.n, np.float32) for _ in outs]
    for i, r in enumerate(res): r[lanes] = D[w[..., 0], cr[:, i], cc[:, i]]
    for out, r in zip(outs, res): out(t, r)
  return run

def _ldmatrix(d, mods, ops):
  """ldmatrix.sync.aligned.m8n8.{x1,x2,x4}{.trans}.shared.b16 r, [p]: lanes 8m..8m+7 give the 16-byte-aligned row
  addresses of matrix m; lane l receives in register m the elements (l >> 2, 2 (l % 4) + {0, 1}) of matrix m (of its
  transpose with .trans), the first in the low half."""
  num = next((int(m[1:]) for m in mods if m in ("x1", "x2", "x4")), 0)
  rest = [m for m in mods if m not in ("x1", "x2", "x4", "trans")]
  if rest not in (["sync", "aligned", "m8n8", "shared", "b16"], ["sync", "aligned", "m8n8", "shared::cta", "b16"]) or not num:
    raise EmulatorError(f"NV emulator: ldmatrix.{'.'.join(mods)} is not implemented (ldmatrix.sync.aligned.m8n8.x1/x2/x4{{.trans}}.shared.b16)")
  outs, addr, trans = [d.writer(x, "b32") for x in vector(ops[0])], d.address(ops[1]), "trans" in mods
  if len(outs) != num: raise EmulatorError(f"NV emulator: ldmatrix .x{num} writes {num} registers, got {len(outs)}")
  l = np.arange(WARP)
  def run(t):
    lanes = _warp_lanes(t, "ldmatrix")
    rows = np.broadcast_to(addr(t), (t.n,))[lanes[:, :8 * num]]   # (W, 8 num): the row addresses
    if np.any(rows % np.uint64(16)): raise EmulatorError(f"NV emulator: kernel {d.name}: ldmatrix row address not a multiple of 16")
    blk = np.broadcast_to(t.block[lanes[:, :1]], rows.shape)
    offs = rows.astype(np.int64)
    if np.any(offs + 16 > t.shared_size): raise EmulatorError(f"NV emulator: kernel {d.name}: ldmatrix row past the block's {t.shared_size} bytes of shared memory")
    at = ((blk * t.shared.shape[1] + offs)[..., None] + np.arange(16)).reshape(-1, 16)   # (W * 8 num, 16): the rows' bytes
    t.not_in_flight(at, None, "ldmatrix")
    t.ordered(at, lanes[:, :8 * num].reshape(-1), "ldmatrix")   # the rows' lanes, by index (ordered() takes a mask or indices)
    flat = t.shared.reshape(-1).view(np.uint16)
    m = flat[((blk * t.shared.shape[1] + offs) // 2)[..., None] + np.arange(8)].reshape(-1, num, 8, 8)   # (W, matrix, row, col)
    if trans: m = m.swapaxes(-1, -2)
    t.counters.shared_read += m.size * 2
    t.count_banks(np.repeat(np.arange(rows.shape[0] * num), 8), offs.reshape(-1), 16)   # a phase per matrix
    lo, hi = m[:, :, l >> 2, 2 * (l & 3)], m[:, :, l >> 2, 2 * (l & 3) + 1]   # (W, matrix, lane)
    words = lo.astype(np.uint32) | (hi.astype(np.uint32) << 16)
    for k, out in enumerate(outs):
      r = np.zeros(t.n, np.uint32)
      r[lanes] = words[:, k, :]
      out(t, r)
  return run

def approximation(exact: np.ndarray, x: np.ndarray) -> np.ndarray:
  """An .approx instruction's f32 result: the correctly rounded value moved one ulp, up or down by the input's last bit
  (deterministic, both directions exercised), which is inside the ISA's bounds (ex2: 2 ulp; lg2: 2**-22 absolute in
  (0.5, 2), relative elsewhere) and never exact where the hardware need not be. Exact where the exact result is an f32
  (ex2 of integers, lg2 of powers of two: the ISA's special values among them), and for infinities, NaN and zero."""
  r = exact.astype(np.float32)
  moved = np.nextafter(r, np.where((x.view(np.uint32) & np.uint32(1)).astype(bool), np.float32(-np.inf), np.float32(np.inf)))
  keep = ~np.isfinite(r) | (r == 0) | (r.astype(np.float64) == exact) | ~np.isfinite(moved)
  return np.where(keep, r, moved)

def ex2_approx(x: np.ndarray) -> np.ndarray: return approximation(np.exp2(x.astype(np.float64)), x)
def lg2_approx(x: np.ndarray) -> np.ndarray: return approximation(np.log2(x.astype(np.float64)), x)

def _approx(fn):
  def f(a, ty, mods):
    if ty != "f32" or "approx" not in mods: raise EmulatorError(f"NV emulator: only .approx.f32 is implemented, not .{'.'.join(mods)}")
    return float_op(fn, ty, mods)(a)
  return _unary(f)

def _ieee(fn):   # rcp and sqrt: IEEE 754 rounding, .rn only (numpy's float32/float64 results are correctly rounded)
  def f(a, ty, mods):
    needs(mods, "rn", f"{ty} rcp/sqrt")
    return float_op(fn, ty, mods)(a)
  return _unary(f)

def _maxmin(is_max: bool):
  def f(a, b, ty, mods):
    if ty[0] != "f": return (np.maximum if is_max else np.minimum)(a, b)
    def pick(x, y):   # the ISA: NaN loses unless both are (.NaN: NaN wins), and +0.0 > -0.0
      first = (x > y) if is_max else (x < y)
      first |= (x == 0) & (y == 0) & (np.signbit(y) if is_max else np.signbit(x))
      r = np.where(first, x, y)
      nan_x, nan_y = np.isnan(x), np.isnan(y)
      if "NaN" in mods: return np.where(nan_x | nan_y, np.nan, r).astype(x.dtype)
      return np.where(nan_x, y, np.where(nan_y, x, r))
    return float_op(pick, ty, mods)(a, b)
  return _binary(f)

def _mul_build(d, mods, ops):   # the wide multiply's result type is twice the instruction's: its writer is built for that type
  ty = types_of(mods)[-1]
  if "wide" not in mods: return _binary(_arith(np.multiply, _mul_int, "rn"))(d, mods, ops)
  wty = {"s32": "s64", "u32": "u64", "s16": "s32", "u16": "u32"}[ty]
  a, b, out = d.reader(ops[1], ty), d.reader(ops[2], ty), d.writer(ops[0], wty)
  return lambda t: out(t, _mul_int(a(t), b(t), ty, mods))

ROUND = {"rn"}
# opcode: (builder, the modifiers it is emulated with besides the types, any other being an error naming it; None: the
# builder checks its own, those with spaces, vector widths and shapes)
OPS: dict[str, tuple[Callable, set[str] | None]] = {
  "mov": (_mov, set()), "cvta": (_cvta, None), "ld": (_ld, None), "st": (_st, None),
  "cp": (_cp_async, None), "shfl": (_shfl, None), "bar": (_bar_warp, None), "barrier": (_bar_warp, None), "mma": (_mma, None), "ldmatrix": (_ldmatrix, None),
  "cvt": (_cvt, set(INT_ROUNDINGS) | ROUND | {"ftz", "sat"}), "selp": (_selp, set()), "bfe": (_bfe, set()), "bfi": (_bfi, set()),
  "setp": (_setp, SETP_CMPS | {"and", "or", "xor", "ftz"}),
  "add": (_binary(_arith(np.add, lambda a, b, ty, m: a + b)), ROUND | {"ftz", "sat"}),
  "sub": (_binary(_arith(np.subtract, lambda a, b, ty, m: a - b)), ROUND | {"ftz", "sat"}),
  "mul": (_mul_build, ROUND | {"lo", "wide", "ftz", "sat"}),
  "div": (_binary(_arith(np.divide, _int_div, "rn")), ROUND | {"ftz"}), "rem": (_binary(_int_rem), set()),
  "mad": (_fused, ROUND | {"lo", "ftz", "sat"}), "fma": (_fused, ROUND | {"ftz", "sat"}),
  "max": (_maxmin(True), {"ftz", "NaN"}), "min": (_maxmin(False), {"ftz", "NaN"}),
  "neg": (_unary(lambda a, ty, m: float_op(np.negative, ty, m)(a) if ty[0] == "f" else -a), {"ftz"}),
  "not": (_unary(lambda a, ty, m: ~a), set()),
  "rcp": (_ieee(lambda a: np.divide(a.dtype.type(1), a)), ROUND | {"ftz"}), "sqrt": (_ieee(np.sqrt), ROUND | {"ftz"}),
  "ex2": (_approx(ex2_approx), {"approx", "ftz"}), "lg2": (_approx(lg2_approx), {"approx", "ftz"}),
  "and": (_logic(np.bitwise_and), set()), "or": (_logic(np.bitwise_or), set()), "xor": (_logic(np.bitwise_xor), set()),
  "shl": (_build_shift(True), set()), "shr": (_build_shift(False), set()),
}

# ***** the tensor core's arithmetic *****

# measured on an H100 (sm_90) with mma.sync m16n8k16 f16/bf16 and m16n8k8 tf32, f32 accumulators: 2.3 million outputs
# of random, wide-exponent, cancelling and special (inf, NaN, subnormal) operands, all bit-exact with this model: exact
# products, the terms cut to 25 bits below the largest exponent (tensor_core_dot), the sum truncated (rz) to f32, NaN
# as 0x7fffffff; a tf32 operand's low 13 bits are not read
MMA_EMIN = {"f16": -14, "bf16": -126, "tf32": -126}
MMA_FRACTION_BITS, MMA_ROUNDING, MMA_NAN = 25, "rz", 0x7fffffff

def mma_dot(A: np.ndarray, B: np.ndarray, C: np.ndarray, ty: str) -> np.ndarray:
  """D = A B + C per warp (A (W, 16, K), B (W, K, 8) exact values of type ty, C (W, 16, 8) float32) as the tensor core adds."""
  return tensor_core_dot(A, B, C, MMA_EMIN[ty], MMA_FRACTION_BITS, MMA_ROUNDING, MMA_NAN)

# ***** running a launch *****

class EmulatedKernel:
  """One decoded kernel: call it with its parameter values, the grid, the block (and dynamic shared bytes); `counters`
  holds what its last call did."""
  def __init__(self, ptx: str, name: str, memory: EmulatedMemory):
    dec = Decoder(ptx, name)
    self.name, self.memory, self.instrs, self.params = name, memory, dec.instrs, dec.param_order
    self.static_shared, self.maxntid, self.reqntid = dec.static_shared, dec.maxntid, dec.reqntid
    self.counters = LaunchCounters()

  def __call__(self, params: dict[str, Any], grid: tuple[int, int, int], block: tuple[int, int, int], shared_bytes: int = 0) -> LaunchCounters:
    nblocks, per_block = int(np.prod(grid)), int(np.prod(block))
    if per_block > MAX_THREADS: raise EmulatorError(f"NV emulator: kernel {self.name}: a block of {block} has {per_block} threads, more than {MAX_THREADS}")
    if self.maxntid is not None and (any(b > m for b, m in zip(block, self.maxntid)) or per_block > np.prod(self.maxntid)):
      raise EmulatorError(f"NV emulator: kernel {self.name}: a block of {block} is larger than its .maxntid {self.maxntid} (the launch fails on the GPU)")
    if self.reqntid is not None and tuple(block) != self.reqntid:
      raise EmulatorError(f"NV emulator: kernel {self.name}: a block of {block} is not its .reqntid {self.reqntid} (the launch fails on the GPU)")
    self.counters = c = LaunchCounters(threads=nblocks * per_block, blocks=nblocks)
    if nblocks == 0 or per_block == 0: return c
    shared = self.static_shared + shared_bytes
    step = max(1, LANES // per_block)   # blocks per batch
    lane = np.arange(per_block)
    tid = {"x": lane % block[0], "y": lane // block[0] % block[1], "z": lane // (block[0] * block[1])}
    wpb = -(-per_block // WARP)
    for first in range(0, nblocks, step):
      ids = np.arange(first, min(first + step, nblocks))
      b = np.repeat(ids, per_block)
      special: dict[str, Any] = {f"%tid.{k}": np.tile(v, len(ids)) for k, v in tid.items()}
      special |= {"%ctaid.x": b % grid[0], "%ctaid.y": b // grid[0] % grid[1], "%ctaid.z": b // (grid[0] * grid[1])}
      special |= {f"%ntid.{k}": block[i] for i, k in enumerate("xyz")} | {f"%nctaid.{k}": grid[i] for i, k in enumerate("xyz")}
      # %warpid is the warp's slot on its SM on the hardware, which no kernel may rely on: here, its place in the block
      special |= {"%laneid": np.tile(lane % WARP, len(ids)), "%warpid": np.tile(lane // WARP, len(ids))}
      t = Thread({}, special, params, self.memory, len(b), block=np.repeat(np.arange(len(ids)), per_block),
                 tid=np.tile(lane, len(ids)), warps_per_block=wpb, shared=np.zeros((len(ids), -(-max(shared, 1) // 16) * 16), np.uint8),
                 counters=c, shared_size=shared)
      if shared: t.write_epoch, t.write_warp, t.read_epoch, t.read_warp = np.full((4, t.shared.size // 4), -1, np.int32)   # Thread.ordered
      self.run_batch(t)
      if t.pending:   # the hardware gives no order between a block's end and copies it never waited for
        raise EmulatorError(f"NV emulator: kernel {self.name}: block {int(t.pending[0][0][0] >> 20) + first} ends with cp.async copies it never waited "
                            f"for (cp.async.wait_all)")
    return c

  def run_batch(self, t: Thread) -> None:
    """Run the lanes of t to their exits: the lowest pc's lanes step (structured code reconverges there); lanes at a
    barrier wait (pcs stays there, waiting set) until every lane not exited waits, then their blocks pass together."""
    instrs, c = self.instrs, t.counters
    pc, pcs, waiting, barrier_ids = 0, None, None, None   # pcs: per-lane program counters while the lanes are diverged
    while t.n:
      if pcs is not None:
        ready = pcs if not waiting.any() else np.where(waiting, len(instrs), pcs)
        pc = int(ready.min())
        if pc == len(instrs):   # every lane waits at a barrier: check the blocks agree, then all pass
          self.release(t, pcs, barrier_ids)
          pcs, waiting = pcs + 1, np.zeros(t.n, bool)
          continue
        t.mask = ready == pc
        if t.mask.all(): pcs, t.mask, waiting, barrier_ids = None, None, None, None
      ins = instrs[pc]
      self.count(t)
      go = t.mask
      if ins.guard is not None:
        g = t.regs.get(ins.guard[0], np.zeros(t.n, bool))
        g = ~g if ins.guard[1] else g
        go = g if go is None else (go & g)
      if ins.kind == "op":
        if go is not t.mask:
          saved, t.mask = t.mask, go
          ins.run(t)
          t.mask = saved
        else: ins.run(t)
        if pcs is None: pc += 1
        else: pcs[t.mask] += 1
      elif ins.kind == "bra":
        taken = np.ones(t.n, bool) if go is None else go
        if pcs is None:
          if taken.all(): pc = ins.target; continue
          if not taken.any(): pc += 1; continue
          pcs, waiting, t.mask = np.full(t.n, pc, np.int64), np.zeros(t.n, bool), np.ones(t.n, bool)
        pcs = np.where(t.mask & taken, ins.target, np.where(t.mask, pcs + 1, pcs))
      elif ins.kind == "bar":
        ids = np.broadcast_to(np.asarray(ins.barrier(t)).astype(np.int64), (t.n,))
        if pcs is None and go is None and (ids == ids[0]).all():   # every thread of every block arrives at once
          c.barriers += int(np.count_nonzero(np.diff(t.block))) + 1
          t.epoch += 1
          pc += 1
          continue
        if pcs is None: pcs, waiting, t.mask = np.full(t.n, pc, np.int64), np.zeros(t.n, bool), np.ones(t.n, bool)
        if barrier_ids is None: barrier_ids = np.zeros(t.n, np.int64)
        arrive = t.mask if go is None else go
        barrier_ids[arrive] = ids[arrive]
        waiting |= arrive
        pcs[t.mask & ~arrive] += 1   # predicated off: they go on
      else:   # exit: these lanes are done
        leaving = np.ones(t.n, bool) if go is None else go
        if leaving.all(): return
        if pcs is not None: pcs[t.mask & ~leaving] += 1
        else: pc += 1
        if leaving.any():
          alive = ~leaving
          t.keep(alive)
          if pcs is not None: pcs, waiting = pcs[alive], waiting[alive]
          if barrier_ids is not None: barrier_ids = barrier_ids[alive]
        t.mask = None

  def count(self, t: Thread) -> None:
    """One instruction issued: once per warp with an active thread, once per active thread."""
    if t.mask is None:
      t.counters.instructions += t.live_warps
      t.counters.thread_instructions += t.n
    else:
      w = t.warp[t.mask]
      if w.size: t.counters.instructions += int(np.count_nonzero(np.diff(w))) + 1
      t.counters.thread_instructions += w.size

  def release(self, t: Thread, pcs: np.ndarray, barrier_ids: np.ndarray) -> None:
    """Every lane waits at a barrier: the threads of a block must wait at the same barrier number (else they would wait
    for each other forever), and an aligned barrier (bar.sync) must be one instruction for a whole warp."""
    same_block, same_warp = t.block[1:] == t.block[:-1], t.warp[1:] == t.warp[:-1]
    aligned = np.array([ins.aligned for ins in self.instrs])[pcs]
    for bad, why in ((same_block & (barrier_ids[1:] != barrier_ids[:-1]), "wait at different barrier numbers: the block would never go on"),
                     (same_warp & (pcs[1:] != pcs[:-1]) & (aligned[1:] | aligned[:-1]),
                      "are in one warp but wait at different barrier instructions, and bar.sync is .aligned")):
      if bad.any():
        k = int(np.flatnonzero(bad)[0])
        raise EmulatorError(f"NV emulator: kernel {self.name}: {t.who(k)} (at `{self.instrs[pcs[k]].text}`) and {t.who(k + 1)} "
                            f"(at `{self.instrs[pcs[k + 1]].text}`) {why}")
    t.counters.barriers += int(np.count_nonzero(np.diff(t.block))) + 1
    t.epoch += 1

