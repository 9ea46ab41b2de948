"""GPU-style heuristics: thread blocks, register tiles, grouped reductions and shared-memory tiles sized from the renderer's limits."""
from __future__ import annotations
from tinycore.dtype import DType, dtypes
from tinycore.helpers import prod
from tinycore.uop import UOp, Ops, GroupOp, AxisType, split_terms
from tinycore.rewrite import graph_rewrite
from tinycore.renderer import Renderer
from tinycore.codegen.opt.kernel import Kernel, Opt, OptOps, OptError, apply_opt, const_size
from tinycore.codegen.opt.tc import use_tensor_cores
from tinycore.codegen.linearize import NEXT_TRIP
from tinycore.codegen.widen import lanes

# a sum of fewer terms that a row of threads would each compute alone is left to them: adding a few terms costs less than
# combining them through shared memory and a barrier (and spreading each of a kernel's many short sums, 500 means of 4 in
# a loss accumulated over a loop, rewrote the whole kernel once per sum: compile time grew with the square of the kernel).
# A conv's input gradient sums 32 output channels' weights per thread of a 256-thread row: spread, its loads fall 7x.
GROUP_LEAST = 16
MAP_LEAST = 8   # a contiguous output axis this long or longer is a row of a map (hand_coded merges it with the next)

def _try(k: Kernel, op: OptOps, r: UOp | int, amount: int) -> Kernel:
  """k with the action applied, or k unchanged where it does not apply."""
  try: return apply_opt(k, Opt(op, r if isinstance(r, int) else r.arg[0], amount))
  except OptError: return k

def _divisor(n: int, most: int, least: int = 2, pad: bool = False) -> int | None:
  """The largest power of two in [least, most] dividing n; `pad`: dividing n run on past its end to its next multiple,
  at most an eighth more trips (_within)."""
  return next((d for d in (1 << i for i in range(most.bit_length() - 1, 0, -1)) if least <= d <= most and (_within(n, d) if pad else n % d == 0)), None)

def _largest_divisor(n: int, most: int) -> int | None:
  """The largest divisor of n in [GROUP_LEAST, most], a power of two or not; None where there is none."""
  return next((d for d in range(min(most, n), GROUP_LEAST - 1, -1) if n % d == 0), None)

def odd_divisor(n: int, most: int) -> int | None:
  """The largest odd divisor of n in [3, most]; None where there is none."""
  return next((d for d in range(min(most, n) - 1 | 1, 2, -2) if n % d == 0), None)

ODD_TILES = tuple(d for d in range(16, 4, -1) if d & (d - 1))   # 15 down to 5, no power of two

def odd_tile(n: int) -> int | None:
  """The longest tile of ODD_TILES that divides a sum of n terms; None where none does."""
  return next((d for d in ODD_TILES if n % d == 0), None)

def _within(n: int, d: int) -> bool:
  """Does n run on to a multiple of d in at most an eighth more trips?"""
  return -n % d <= n // 8

def _padded(k: Kernel, r: UOp, d: int) -> tuple[Kernel, UOp] | None:
  """(k with r padded (PADTO) to a multiple of d, r as it is then); k and r unchanged where d divides r, None where the
  pad does not apply. For an axis no power of two of GROUP_LEAST or more divides (GPT-2's vocabulary of 50257, a
  prime), which would otherwise be left to one thread per output (a sum walked alone) or cross its block's threads in
  the other direction (a warp reading 32 rows, a sector each). The trips past its end load nothing, add the reduction's
  identity and store nothing (kernel.py pad_range)."""
  if const_size(r) % d == 0: return k, r
  return None if len((p := _try(k, OptOps.PADTO, r, d)).applied) == len(k.applied) else (p, p.rng(r.arg[0]))

def _reads(k: Kernel, r: UOp) -> list[UOp]:
  """The global loads whose value changes with r."""
  return [u for u in k.order if u.op is Ops.LOAD and u.src[0].src[0].op is Ops.DEFINE_GLOBAL and r in k.deps[u]]

def _strides(k: Kernel, r: UOp) -> list[int]:
  """r's coefficient in each global load's address that reads it (0 where it is not a plain term)."""
  return [split_terms(u.src[0].src[1])[0].get(r, 0) for u in _reads(k, r)]

def _along(k: Kernel, r: UOp) -> bool:
  """Does some global load read consecutive elements along r (coefficient 1)? A load reading r other than as a plain
  term (a max-pool's gradient read at h // 2) says nothing either way."""
  return min([abs(s) for s in _strides(k, r) if s] or [0]) == 1

def _group(k: Kernel, r: UOp, g: int) -> Kernel:
  """r's sum spread over g threads. Where the target loads several elements at once and the sum reads r contiguously,
  each thread first takes that many consecutive terms a trip (UNROLL, then GROUP of the rest): its reads are one vector
  load (codegen/widen.py), neighbouring threads' neighbouring vectors."""
  n = min((lanes(k.ren, u.dtype) for u in _reads(k, r)), default=1)
  if n > 1 and all(s == 1 for s in _strides(k, r)) and const_size(r) % (n * g) == 0:
    if len((unrolled := _try(k, OptOps.UNROLL, r, n)).applied) > len(k.applied) and \
       len((grouped := _try(unrolled, OptOps.GROUP, r.arg[0], g)).applied) > len(unrolled.applied):
      return grouped
  return _try(k, OptOps.GROUP, r, g)

def _map_row_next(k: Kernel, glob: list[UOp], out: UOp, room: int) -> UOp | None:
  """The output axis a map's row continues along (the one of stride len(out)), where out, the output's contiguous axis,
  is such a row: MAP_LEAST or longer, and no power of two from GROUP_LEAST up to room divides it or pads to it (26, 13,
  56); None where it is not."""
  if const_size(out) < MAP_LEAST or _divisor(const_size(out), room, GROUP_LEAST, pad=True) is not None: return None
  return next((o for o in glob if k.output_coefficient(o) == const_size(out)), None)

def _reads_as_one(k: Kernel, inner: UOp, outer: UOp) -> bool:
  """Does every global load that reads inner or outer read them as one axis (outer's coefficient inner's times its
  length, both plain terms), or as a broadcast along both? One that reads them otherwise (a max pool's gradient at
  (y // 2, x // 2)) would take a merged vector's elements one at a time, each lane's 16 bytes apart: 4 times the
  sectors a warp touches."""
  for u in _reads(k, inner) + _reads(k, outer):
    terms = split_terms(u.src[0].src[1])[0]
    ci, co = terms.get(inner), terms.get(outer)
    if ci is None or co is None or co != ci * const_size(inner): return False
  return True

def _matmul(k: Kernel) -> tuple[UOp, UOp] | None:
  """(rows, cols) of a product's reduction whose two operands each skip an output axis (C[i, j] +=
  A[i, k] * B[k, j]: B does not change with i, A with j): the block's threads can share them. cols is the output's
  contiguous axis where it can be."""
  if len(k.reduces) != 1 or (x := k.reduces[0]).arg is not Ops.ADD or not dtypes.is_float(x.dtype): return None
  loads = [u for u in x.src[0].toposort() if u.op is Ops.LOAD and u.src[0].src[0].op is Ops.DEFINE_GLOBAL]
  glob = [r for r in k.axes(AxisType.GLOBAL) if const_size(r) is not None and const_size(r) >= 16]
  skipped = [[r for r in glob if r not in k.deps[ld]] for ld in loads]
  pairs = [(a, b) for la, sa in zip(loads, skipped) for lb, sb in zip(loads, skipped) if la is not lb
           for a in sb if a in k.deps[la] for b in sa if b in k.deps[lb] and a is not b]
  if not pairs: return None
  rows, cols = max(pairs, key=lambda p: (k.output_coefficient(p[1]) == 1, const_size(p[0]) * const_size(p[1])))
  return rows, cols

def _short_rows_merged(k: Kernel) -> Kernel | None:
  """k with its output's contiguous axis, while shorter than GROUP_LEAST, merged with the next axis of the output (by
  stride) that the same loads read, itself that short: a conv's map of 14x14 or 7x7 pixels becomes one axis of 196 or
  49 pixels (in its input gradient's tap products, stored (ky, y, kx, x), the rows too); None where the axis is not
  that short or nothing such follows it. A product's sum over such maps is a matmul whose pixels are one axis (_matmul
  takes axes of GROUP_LEAST or more): tiled, not left to one output a thread reading both operands from global memory.
  (Not into a longer axis: a conv weight gradient's 3x3 taps merged into its 16 channels made a tile of 144 columns,
  3 blocks where the taps as blocks of their own gave 9.)"""
  merged = k
  while True:
    glob = [r for r in merged.axes(AxisType.GLOBAL) if const_size(r) is not None]
    if (out := next((r for r in glob if merged.output_coefficient(r) == 1), None)) is None or const_size(out) >= GROUP_LEAST: break
    loads = [u for u in merged.order if u.op is Ops.LOAD]
    readers = {o: frozenset(u for u in loads if o in merged.deps[u]) for o in glob}
    same = [o for o in glob if o is not out and merged.output_coefficient(o) > 1 and readers[o] == readers[out] and const_size(o) < GROUP_LEAST]
    if not same: break
    nxt = min(same, key=merged.output_coefficient)
    if len((m := _try(merged, OptOps.MERGE, nxt, out.arg[0])).applied) == len(merged.applied): break
    merged = m
  return merged if merged is not k else None

# A row kernel (a softmax, a layernorm: each output row computed from reductions of the same row) keeps each row in one
# block: runs of the target's widest access (UPCAST), across up to 256 threads (LOCAL), up to ROW_STEPS runs per thread
# (UPCAST, written out). The row's reductions are spread over the threads that write it (shared memory) with the same
# split (_group), so a thread's loads for the reductions and for its outputs are the same registers: the row is read
# once and its values are computed once per row, not once per element. The scheduler fuses a row's reductions into
# the kernel using them where row_split finds a layout (schedule.py find_realizes); shorter rows than GROUP_LEAST are
# left to the cost rule there (each thread recomputing a few terms).
ROW_STEPS = 4

def has_rows(ren: Renderer) -> bool:
  """Does the target run row kernels at all: blocks of threads sharing memory?"""
  return ren.global_dims > 0 and ren.has_shared and ren.max_threads_per_group >= 2

def row_split(ren: Renderer, dt: DType, n: int) -> tuple[int, int, int] | None:
  """(lanes, threads, steps) with lanes * threads * steps = n: a row of n elements of dt in one block of this target;
  None where it has no blocks sharing memory, or the row is shorter than GROUP_LEAST or too long for one block."""
  if not has_rows(ren) or n < GROUP_LEAST: return None
  most = min(256, ren.max_threads_per_group)
  for ln in dict.fromkeys((lanes(ren, dt), 1)):
    if n % ln: continue
    for steps in range(1, min(ROW_STEPS, ren.upcast_max) + 1):
      if (n // ln) % steps == 0 and 2 <= n // ln // steps <= most: return ln, n // ln // steps, steps
  return None

def _row(k: Kernel) -> tuple[UOp, tuple[int, int, int]] | None:
  """The output axis of a row kernel and its split: the contiguous output axis, none of whose reductions depend on it,
  each of them over a range as long as it (the row it reads)."""
  out = next((r for r in k.axes(AxisType.GLOBAL) if k.output_coefficient(r) == 1), None)
  if out is None or (n := const_size(out)) is None or not k.reduces: return None
  if any(out in k.deps[x] or not any(const_size(r) == n for r in x.src[1:]) for x in k.reduces): return None
  return None if (split := row_split(k.ren, k.sink.src[0].src[1].dtype, n)) is None else (out, split)

def _row_layout(k: Kernel, out: UOp, split: tuple[int, int, int]) -> Kernel:
  """out as `steps` runs per thread of `lanes` consecutive elements, `threads` threads apart: (steps, threads, lanes)."""
  ln, threads, steps = split
  if ln > 1: k = _try(k, OptOps.UPCAST, out, ln)
  k = _try(k, OptOps.LOCAL, out.arg[0], threads)
  return k if steps == 1 else _try(k, OptOps.UPCAST, out.arg[0], steps)

def hand_coded(k: Kernel) -> Kernel:
  ren = k.ren
  if not ren.has_local: return k
  if ren.tensor_cores and (tc := use_tensor_cores(k)) is not None: return tc
  # (a product summed over fewer than GROUP_LEAST terms, a conv of one input channel's 3x3 taps, gains nothing from tiles
  # it would copy once: its outputs' writes are its work, laid out below like an elementwise kernel's)
  if ren.has_shared and k.reduces and prod(const_size(r) or GROUP_LEAST for r in k.reduces[0].src[1:]) >= GROUP_LEAST:
    # (the merged map first: with it short, the tile's other side would be the next long axis, a batch of 32 images,
    # each thread's products then reading inputs no neighbour along the map shares)
    if (rows := _short_rows_merged(k)) is not None and (mm := _matmul(rows)) is not None: k = rows
    else: mm = _matmul(k)
    if mm is not None: return _tile_matmul(k, *mm)
  if (row := _row(k)) is not None: k = _row_layout(k, *row)   # (only on targets with shared memory: row_split)
  glob = [r for r in k.axes(AxisType.GLOBAL) if const_size(r) is not None]
  outputs = prod(const_size(r) for r in glob)
  red = [r for x in k.reduces for r in x.src[1:] if const_size(r) is not None]
  def longest(red: list[UOp]) -> UOp:   # the sum's axis its reads run along, else its longest
    return max(red, key=lambda r: (_along(k, r), const_size(r)))
  # the longest sum (a sum of sums, as a split reduction leaves, spreads its inner one)
  heavy = [r for r in max(k.reduces, key=lambda x: prod(const_size(r) or 1 for r in x.src[1:])).src[1:] if const_size(r) is not None] if k.reduces else []
  if ren.has_shared and row is None and heavy and prod(const_size(r) for r in heavy) >= 64 and outputs * 8 <= const_size(longest(heavy)) * 1024:
    # few outputs, long sums: each output's sum spread over a group of threads (neighbours reading neighbours). Where no
    # power of two of 16 or more divides its longest axis (a convolution's 26x26 map, a batch cut into 6 partials of
    # 43), the sum's axes are merged (the contiguous one innermost), from the contiguous end only until the merged one
    # has a divisor of 16 or more that fills a block, and spread over its largest: 16 lone threads each summing 173k
    # terms is what a conv's bias gradient became otherwise. The axes left out stay loops of their own: a weight
    # gradient over 64 images x 26x26 pixels groups the pixels (169 threads) and loops over the images, each term's
    # address a sum, where all three merged cut every term's index with divisions (the digits step on the emulators:
    # 20% fewer instructions on NV, 22% on AMD)
    # (a power of two well short of a block, 16 of a linear layer's 2704 = 16 x 13^2 features, left each thread a chain
    # of 169 terms: the largest divisor, 208, spreads it over 13x more threads, combined through shared memory)
    r, want = longest(heavy), min(256, ren.max_threads_per_group)
    if (g := _divisor(const_size(r), want, GROUP_LEAST)) is not None and (d := _largest_divisor(const_size(r), want)) >= 4 * g: g = d
    if g is None and len(heavy) > 1:
      order = sorted(heavy, key=lambda r: (_along(k, r), -max([abs(s) for s in _strides(k, r)] or [0])))
      # merged from the contiguous end, only as far as a group fills: the axes outside stay loops of their own
      r = order[-1]
      for o in reversed(order[:-1]):
        k = _try(k, OptOps.MERGE, o, r.arg[0])
        r = k.rng(o.arg[0])
        if (g := _largest_divisor(const_size(r), want)) is not None and g >= GROUP_LEAST: break
    if g is None and (d := _divisor(const_size(r), want, GROUP_LEAST, pad=True)) is not None and (padded := _padded(k, r, d)) is not None: (k, r), g = padded, d
    if g is not None: k = _group(k, r, g)
  # elementwise work where the target loads and stores several elements at once: each thread takes a few consecutive
  # outputs (and the inputs read along them), so its accesses are vector ones (codegen/widen.py); not work whose elements
  # each take many operations (_heavy)
  if not k.reduces and (out := next((r for r in glob if k.output_coefficient(r) == 1), None)) is not None and \
     (n := min(lanes(ren, k.sink.src[0].src[1].dtype), ren.upcast_max)) > 1 and not _heavy(k):
    # a map's row no vector divides (26 pixels) is first merged with the axis it continues along (26 x 26 = 169 x 4),
    # as the threads' layout below merges it anyway (a row that pads to a block's threads stays: 4099)
    while const_size(out) % n and (nxt := _map_row_next(k, glob, out, min(256, ren.max_threads_per_group))) is not None and \
          _reads_as_one(k, out, nxt) and len((merged := _try(k, OptOps.MERGE, nxt, out.arg[0])).applied) > len(k.applied):
      k, out = merged, merged.rng(nxt.arg[0])
      glob = [r for r in k.axes(AxisType.GLOBAL) if const_size(r) is not None]
    if const_size(out) % n == 0: k = _try(k, OptOps.UPCAST, out, n)
    glob = [r for r in k.axes(AxisType.GLOBAL) if const_size(r) is not None]
  # output axes across the threads of a block, the contiguous one fastest
  room = min(256, ren.max_threads_per_group) // prod(const_size(t) for t in k.threads())
  # a contiguous output axis of MAP_LEAST or more that no power of two of GROUP_LEAST or more divides, nor pads to (the
  # rows of a 26x26 or 13x13 map), is merged with the axis the output continues along: the block's threads then run
  # along the map (its loads index it with a division), where they ran across channels or images, a sector a lane.
  # (Shorter ones, a window's 3 taps, keep their shape: their kernels are laid out by the rules below; and a kernel of
  # fewer outputs than a block's threads has nothing to spread.)
  while room >= GROUP_LEAST and prod(const_size(r) for r in glob) >= room and (out := next((r for r in glob if k.output_coefficient(r) == 1), None)) is not None and \
        (nxt := _map_row_next(k, glob, out, room)) is not None and len((merged := _try(k, OptOps.MERGE, nxt, out.arg[0])).applied) > len(k.applied):
    k, glob = merged, [r for r in merged.axes(AxisType.GLOBAL) if const_size(r) is not None]
  for r in sorted(glob, key=lambda r: (k.output_coefficient(r) != 1, k.output_coefficient(r))):
    if room >= GROUP_LEAST and k.output_coefficient(r) == 1 and _divisor(const_size(r), room, GROUP_LEAST) is None and \
       (d := _divisor(const_size(r), room, GROUP_LEAST, pad=True)) is not None and (padded := _padded(k, r, d)) is not None: k, r = padded
    if room < 2 or (n := _divisor(const_size(r), room)) is None: continue
    before = len(k.applied)
    k = _try(k, OptOps.LOCAL, r, n)
    if len(k.applied) > before: room //= n
  # a sum every thread of a row of outputs (or of another sum's group) would compute alone (softmax's, layernorm's) is
  # spread over those threads
  tried: set[int] = set()
  while ren.has_shared:
    for x in (x for x in k.reduces if not any(t.arg[1] in (AxisType.GROUP_REDUCE, AxisType.LOCAL) for t in x.src[1:]) and
              prod(const_size(r) or GROUP_LEAST for r in x.src[1:]) >= GROUP_LEAST):
      free = [t for t in k.axes(AxisType.LOCAL, AxisType.GROUP_REDUCE) if t not in k.deps[x]]
      # (a range the threads' count does not divide is padded to a multiple of it, within an eighth more terms)
      cands = [r for r in x.src[1:] if const_size(r) is not None and r.arg[0] not in tried and any(_within(const_size(r), const_size(t)) for t in free)]
      if free and cands: break
    else: break
    tried.add((r := longest(cands)).arg[0])
    t = min((t for t in free if _within(const_size(r), const_size(t))), key=lambda t: -const_size(r) % const_size(t))
    if (padded := _padded(k, r, const_size(t))) is None: continue
    k = _group(*padded, const_size(t))
  # each thread's own part of a sum taken 4 terms a trip: four independent loads in flight, not one waiting on the last
  for i in range(len(k.reduces)):
    own = [r for r in k.reduces[i].src[1:] if r.arg[1] is AxisType.REDUCE and (n := const_size(r)) is not None and n >= 8 and n % 4 == 0]
    if own: k = _try(k, OptOps.UNROLL, min(own, key=lambda r: min([abs(s) for s in _strides(k, r)] or [1 << 62])), 4)
  # a sum's loops of ROW_STEPS trips or fewer are written out. A grouped sum's few terms left per thread (a softmax row
  # of 4096 over 256 threads: 4 vectors of 4) are then held in registers, and another sum over the same elements (the
  # row's max, then its exp-sum) or the row's store reads them there instead of loading them again. A 3x3 window's taps
  # are constants apart and their loads in flight together, where RDNA3 (its own scheduler) waited for each tap's load
  # and counted and branched each trip (ptxas unrolled them itself: sm_90 only lost registers, 62 -> 39 for a conv's
  # input gradient)
  for r in [r for x in k.reduces for r in x.src[1:] if r.arg[1] is AxisType.REDUCE and (n := const_size(r)) is not None and n <= ROW_STEPS]:
    if any(x.arg[0] == r.arg[0] and x.arg[1] is AxisType.REDUCE for x in k.ranges): k = _try(k, OptOps.UNROLL, r, const_size(r))
  return k

# A product's sum that _tile_matmul tiles (a matmul, a convolution) runs one block per tile of about TILE_OUTPUTS
# outputs (16x16 threads, 4x4 outputs each). Where its outputs make fewer than FEW_TILES blocks, most of a large GPU's
# hundred-odd multiprocessors would idle through it (one image's 7x7 map of 512 channels convolved: 8 blocks, each
# summing 4608 terms; a conv's 64x64x3x3 weight gradient: 9 blocks per partial): the scheduler cuts the sum into
# partials (schedule.py split_reduce), a kernel of their own, so the blocks number up to TILE_BLOCKS, each partial
# still TILE_TERMS_LEAST terms or more (16 shared-memory tiles of 16), and sums them in another. Only sums of
# TILE_SPLIT_LEAST terms or more: a thread of a shorter one's tile runs 16k multiply-adds or fewer, about what a second
# kernel's launch and the partials' trip through memory cost (a small MLP's 784-term layer stays one kernel).
TILE_OUTPUTS, FEW_TILES, TILE_BLOCKS, TILE_TERMS_LEAST, TILE_SPLIT_LEAST = 64 * 64, 64, 256, 256, 1024

def tile_parts(ren: Renderer, outputs: int, n: int) -> int:
  """The fewest partials a tiled product's sum of n terms for each of `outputs` outputs is cut into on this target; 1
  where it is not cut (a target without blocks sharing memory, enough tiles, too short a sum)."""
  if not has_rows(ren) or n < TILE_SPLIT_LEAST or (tiles := -(-outputs // TILE_OUTPUTS)) >= FEW_TILES: return 1
  return max(1, min(-(-TILE_BLOCKS // tiles), n // TILE_TERMS_LEAST))

# Work whose elements each take more operations than this, counted once the target's own expansions are made (its
# extra_matcher: a float32 sine's range reduction and polynomial, 198), is bound by them, not by its accesses: copies of
# it per thread would multiply the registers a thread holds for little (AMD's float32 sine, 4 copies: 88 VGPRs; its
# float64 tangent, 982 operations: 2 copies needed more than its 256, which it cannot spill).
ELEMENT_OPS_MOST = 128

def _heavy(k: Kernel) -> bool:
  """Do k's elements each take more than ELEMENT_OPS_MOST operations on its target?"""
  sink = k.sink if k.ren.extra_matcher is None else graph_rewrite(k.sink, k.ren.extra_matcher)
  return sum(u.op in GroupOp.ALU for u in sink.toposort()) > ELEMENT_OPS_MOST

def _tile_matmul(k: Kernel, rows: UOp, cols: UOp) -> Kernel:
  """A block of up to 16x16 threads, each computing up to 4x4 outputs (the block a 64x64 tile; 8x8 and 128x128 where
  both output axes are 1024 or longer and the target takes 8 copies: twice the multiply-adds per shared-memory read;
  up to 7 along an output row whose odd part is 7, a conv's 56 or 28 pixels), the sum staged in shared memory 16 at a
  time (tiles of both operands: 8 or 16 KiB in float32; other lengths where 16, 8 and 4 do not divide it) and unrolled."""
  rid, cid = rows.arg[0], cols.arg[0]
  per_thread = 8 if min(const_size(rows), const_size(cols)) >= 1024 and k.ren.upcast_max >= 8 else 4
  lim = min(ren_threads := k.ren.max_threads_per_group, 256)
  # where the target reads several elements at once, each thread's first `wide` outputs along an axis are consecutive
  # (UPCAST before LOCAL): its values of the operand tile read along that axis lie side by side in shared memory, one
  # wide read (codegen/widen.py), and neighbouring threads' reads are neighbouring vectors (no bank conflicts); more
  # outputs per thread repeat that a block's width further on. Else neighbouring threads take neighbouring outputs.
  wide = min((lanes(k.ren, u.dtype) for u in _reads(k, k.reduces[0].src[1])), default=1)
  sizes = {}
  for r, cap in ((cols, 16), (rows, lim // 16)):
    # (a map of 7x7 pixels, 49, takes 7 threads: no power of two divides it)
    if (n := _divisor(const_size(r), min(cap, ren_threads)) or (odd_divisor(const_size(r), min(cap, ren_threads)) if r is cols else None)) is not None:
      sizes[r.arg[0]] = n
  for i, n in sizes.items():
    if wide > 1 and (u := _divisor(const_size(k.rng(i)) // n, min(wide, per_thread))) is not None: k = _try(k, OptOps.UPCAST, i, u)
    # an output row of 7 x 2^k (a conv's 56, 28 or 14 pixels) leaves an odd part no power of two divides: each thread
    # takes that many consecutive outputs along it (its register tile's other side), else every thread held one column
    # of the tile and read a shared value per multiply-add. Consecutive, a conv thread's 7 pixels read 9 of the input
    # row per tap row (the taps' windows overlap), and neighbouring lanes' reads, an odd number of words apart, fall in
    # distinct banks.
    elif i == cid and _divisor(rest := const_size(k.rng(i)) // n, per_thread) is None and (u := odd_divisor(rest, 2 * per_thread)) is not None:
      k = _try(k, OptOps.UPCAST, i, u)
    k = _try(k, OptOps.LOCAL, i, n)
  for i in (cid, rid):   # an axis the block's threads took whole (16 rows) has no range left to upcast
    left = per_thread // prod(o.amount for o in k.applied if o.op is OptOps.UPCAST and o.axis == i)
    if left > 1 and any(r.arg[0] == i for r in k.ranges) and (n := _divisor(const_size(k.rng(i)), left)) is not None: k = _try(k, OptOps.UPCAST, i, n)
  # the innermost sum axis that tiles (a conv's kernel rows and columns do not: its channels do), where the axes inside
  # it are short (a conv's taps); one with a long axis inside (a weight gradient's rows, each of 32 pixels) would make
  # a tile of whole rows of both operands, read across its rows (bank conflicts): the merged sum below is staged
  red = [r for r in k.reduces[0].src[1:] if const_size(r) is not None]
  for i in reversed(range(len(red))):
    if all(const_size(r) < GROUP_LEAST for r in red[i + 1:]) and (staged := _stage(k, red[i])) is not None: return staged
  # a tile is copied once per trip of the loop over tiles, which no other loop of the sum that the shared loads read may
  # enclose (a conv's weight gradient sums over the batch, then rows, then columns: no axis alone tiles): the sum's axes
  # are merged into one, the innermost varying fastest, and that is tiled
  merged = k
  if len(red) > 1:
    for r in red[1:]: merged = _try(merged, OptOps.MERGE, red[0], r.arg[0])
    if len(merged.applied) != len(k.applied) + len(red) - 1: merged = None
    elif (staged := _stage(merged, merged.rng(red[0].arg[0]))) is not None: return staged
  # a sum no tile of 4, 8 or 16 divides (a conv's weight gradient over 2 images of 7x7 pixels: 98 terms) takes the
  # longest other tile of 4 to 16 that divides it (14), rather than no shared memory at all
  if red and merged is not None and (staged := _stage(merged, merged.rng(red[0].arg[0]), odd=True)) is not None: return staged
  return k

def _stage(k: Kernel, r: UOp, odd: bool = False) -> Kernel | None:
  """k with r's sum staged in shared memory 16, 8 or 4 terms a tile (`odd`: ODD_TILES), each tile's terms unrolled (the
  largest divisor of the tile within upcast_max); None where no tile fits. The longest tile that is double-buffered
  (its next tile loaded while this one is summed) first, else the longest that fits: a conv's weight tile of 16
  channels (x 3 x 3 x 64 filters) fits only single, and ptxas gave its kernel 255 registers and spills; of 8,
  double-buffered, 48 registers."""
  fits = None
  for bk in (16, 8, 4) if not odd else ODD_TILES:
    inner = k.next_id   # the id STAGE gives the tile's range
    if const_size(r) % bk == 0 and len((staged := _try(k, OptOps.STAGE, r.arg[0], bk)).applied) > len(k.applied):
      staged = _try(staged, OptOps.UNROLL, inner, max(d for d in range(1, min(bk, k.ren.upcast_max) + 1) if bk % d == 0))
      if any(u.op is Ops.BARRIER and u.arg is NEXT_TRIP for u in staged.sink.toposort()): return staged
      fits = fits or staged
  return fits
