"""Benchmark of the graph core: UOp creation, toposort and symbolic graph_rewrite, side by side with tinygrad when installed."""
from __future__ import annotations
import argparse, gc, pathlib, sys, time
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))  # run from a checkout without installing

class Core:
  """The few graph operations the workloads need, bound to one framework."""
  def __init__(self, name, var, rng, const, sink, toposort, simplify):
    self.name, self.var, self.rng, self.const, self.sink, self.toposort, self.simplify = name, var, rng, const, sink, toposort, simplify

def tinycore_core() -> Core:
  from tinycore.dtype import dtypes
  from tinycore.uop import UOp, Ops, AxisType, Variable
  from tinycore.rewrite import graph_rewrite
  from tinycore.uop import symbolic_rules
  def const(v): return UOp.const(dtypes.index, v)
  return Core("tinycore", lambda n, lo, hi: Variable(n, lo, hi), lambda i, n: UOp(Ops.RANGE, dtypes.index, (const(n),), (i, AxisType.GLOBAL)),
              const, lambda *us: UOp(Ops.SINK, dtypes.void, us), lambda u: u.toposort(), lambda u: graph_rewrite(u, symbolic_rules))

def tinygrad_core() -> Core | None:
  try:
    from tinygrad.uop.ops import UOp, graph_rewrite
    from tinygrad.uop.symbolic import symbolic
    from tinygrad.dtype import dtypes
  except ImportError: return None
  idx = getattr(dtypes, "index", None) or getattr(dtypes, "weakint")
  return Core("tinygrad", lambda n, lo, hi: UOp.variable(n, lo, hi), lambda i, n: UOp.range(n, i), lambda v: UOp.const(v, idx),
              lambda *us: UOp.sink(*us), lambda u: u.toposort(), lambda u: graph_rewrite(u, symbolic))

# ***** workloads: each builds a fresh graph (new variable names, so hash-consing finds nothing) and returns its root *****

def chain(core: Core, salt: int, n: int):
  """A deep chain: every step a new node on top of the previous one, like index math rebuilt through many views."""
  x = core.var(f"x{salt}", 0, 1000)
  for i in range(n): x = (x + core.const(i % 7 + 1)) * core.const(i % 3 + 2)
  return x

def nest(core: Core, salt: int, n: int):
  """A deep chain that stays deep: a sum, a remainder and a max at every level."""
  rs = [core.rng(salt * 10 + i, 8 << i) for i in range(4)]
  x = core.var(f"x{salt}", 0, 1000)
  for i in range(n): x = ((x + rs[i % 4] * core.const(i % 5 + 1)) % core.const(997)).maximum(rs[(i + 1) % 4])
  return x

def big_sum(core: Core, salt: int, n: int):
  """A sum of n index terms over a few loop variables: like terms to combine and div/mod terms that stay."""
  rs = [core.rng(salt * 100 + i, 4 + i) for i in range(8)]
  v = core.var(f"v{salt}", 0, 31)
  acc = core.const(0)
  for i in range(n):
    r = rs[i % 8]
    acc = acc + (r * core.const(i % 5 + 1) if i % 3 else (r * core.const(i % 13 + 3) + v) // core.const(i % 4 + 2))
  return acc

def kernel_indexes(core: Core, salt: int, n: int):
  """n small index expressions of the shape lowering leaves behind: flatten, unflatten by // and %, reflatten, guards."""
  r0, r1, r2 = core.rng(salt * 10, 16), core.rng(salt * 10 + 1, 8), core.rng(salt * 10 + 2, 8)
  out = []
  for k in range(n):
    flat = r0 * core.const(64) + r1 * core.const(8) + r2 + core.const(k % 64)
    hi, lo = (flat // core.const(8)) % core.const(8), flat % core.const(8)
    idx = hi * core.const(8) + lo + (flat // core.const(64)) * core.const(64)
    out.append(idx < core.const(1024 + k))
    out.append((r1 * core.const(4) + r2 // core.const(2)) // core.const(4) + idx)
  return core.sink(*out)

# ***** measuring *****

def _time(fn) -> float:
  gc.collect()
  t = time.perf_counter(); fn(); return time.perf_counter() - t

def measure(cores: list[Core], scale: float, reps: int) -> dict[str, dict[str, tuple[int, float | None]]]:
  """label -> framework -> (nodes, best seconds). The frameworks take turns inside every repetition, so a busy
  machine slows both alike. Every repetition builds a fresh graph (new variable names: hash-consing finds nothing)."""
  res: dict[str, dict[str, tuple[int, float | None]]] = {}
  salt = iter(range(1, 10**6))
  def record(label, core, nodes, sec):
    old = res.setdefault(label, {}).get(core.name)
    res[label][core.name] = (nodes, sec if old is None or sec is None else min(old[1], sec))
  for _ in range(reps):
    for core in cores:
      n = int(20000 * scale)
      root: list = []
      sec = _time(lambda: root.append(chain(core, next(salt), n)))
      nodes = len(core.toposort(root[0]))
      record("create (chain)", core, nodes, sec)
      record("toposort (chain)", core, nodes, _time(lambda: core.toposort(root[0])))
      for label, work, n in (("rewrite chain", chain, int(3000 * scale)), ("rewrite nest", nest, int(1000 * scale)),
                             ("rewrite sum", big_sum, int(1000 * scale)), ("rewrite kernel idx", kernel_indexes, int(300 * scale))):
        g = work(core, next(salt), n)
        out: list = []
        try: record(label, core, len(core.toposort(g)), _time(lambda: out.append(core.simplify(g))))
        except RecursionError:
          print(f"{core.name}: {label} hit the recursion limit")
          continue
        record(label + " (out nodes)", core, len(core.toposort(out[0])), None)
  return res

def main():
  p = argparse.ArgumentParser(description=__doc__)
  p.add_argument("--scale", type=float, default=1.0, help="multiply every workload's size")
  p.add_argument("--reps", type=int, default=3, help="best of this many runs")
  args = p.parse_args()
  cores = [c for c in (tinycore_core(), tinygrad_core()) if c is not None]
  if len(cores) == 1: print("tinygrad is not installed: measuring tinycore alone (pip install tinygrad to compare)")
  res = measure(cores, args.scale, args.reps)
  names = [c.name for c in cores]
  print(f"{'measurement':<32}" + "".join(f"{n + ' nodes':>16}{n + ' knodes/s':>20}" for n in names) + ("   speed tinycore/tinygrad" if len(names) > 1 else ""))
  for label, per in res.items():
    if any(n not in per for n in names): continue
    speeds = [per[n][0] / per[n][1] / 1e3 if per[n][1] else None for n in names]
    row = f"{label:<32}" + "".join(f"{per[n][0]:>16}" + (f"{s:>20.3g}" if s else f"{'':>20}") for n, s in zip(names, speeds))
    if len(names) > 1 and all(speeds): row += f"   {speeds[0] / speeds[1]:.2f}x"
    print(row)

if __name__ == "__main__": main()
