"""Hand-written PTX kernels exercising the hardware features the emulator models (shared memory, barriers, shuffles,
vector accesses, fma, ldmatrix, mma), each with seeded inputs; `run_case` runs one on the emulator or, through the
CUDA driver, on a GPU. `python backends/tinygrad-nv/tests/ptx_kernels.py OUT.json` records a GPU's outputs (the table
test_nv_hardware.py holds the emulator to)."""
from __future__ import annotations
import base64, json, sys, zlib
from dataclasses import dataclass
import numpy as np

def kernel(name: str, params: int, body: str, regs: str = "", target: str = "sm_80") -> str:
  """A PTX module of one kernel taking params u64 pointers data0.. (grid and block as given: global_size counts blocks)."""
  head = f"// {name}\n// launch: groups\n.version 8.0\n.target {target}\n.address_size 64\n"
  ps = ",\n".join(f"\t.param .u64 data{i}" for i in range(params))
  decl = ".reg .pred %p<8>;\n.reg .b32 %r<40>;\n.reg .f32 %f<40>;\n.reg .b64 %rd<16>;\n.reg .f64 %fd<8>;\n" + regs
  return f"{head}.visible .entry {name}(\n{ps})\n{{\n{decl}{body}\n}}\n"

@dataclass
class Case:
  """A kernel with its launch and data: outputs are data0.. (dtype, count) zero-filled, inputs follow."""
  name: str
  ptx: str
  grid: tuple[int, int, int]
  block: tuple[int, int, int]
  inputs: list[np.ndarray]
  outputs: list[tuple[type, int]]

# ***** shared memory, barriers, shuffles *****

BLOCK_SUM = kernel("block_sum", 2, """
  .shared .align 4 .f32 partial[256];
  ld.param.u64 %rd0, [data0];
  ld.param.u64 %rd1, [data1];
  mov.u32 %r0, %tid.x;
  mov.u32 %r1, %ctaid.x;
  mad.lo.s32 %r2, %r1, 256, %r0;
  mul.wide.u32 %rd2, %r2, 4;
  add.s64 %rd2, %rd2, %rd1;
  ld.global.f32 %f0, [%rd2];
  mov.u32 %r3, partial;
  shl.b32 %r4, %r0, 2;
  add.s32 %r5, %r3, %r4;
  st.shared.f32 [%r5], %f0;
  bar.sync 0;
  mov.u32 %r6, 128;
$loop:
  setp.ge.u32 %p0, %r0, %r6;
  @%p0 bra $skip;
  shl.b32 %r7, %r6, 2;
  add.s32 %r8, %r5, %r7;
  ld.shared.f32 %f1, [%r8];
  ld.shared.f32 %f2, [%r5];
  add.rn.f32 %f2, %f2, %f1;
  st.shared.f32 [%r5], %f2;
$skip:
  bar.sync 0;
  shr.u32 %r6, %r6, 1;
  setp.ge.u32 %p1, %r6, 32;
  @%p1 bra $loop;
  setp.ge.u32 %p2, %r0, 32;
  @%p2 exit;
  ld.shared.f32 %f3, [%r5];
  shfl.sync.bfly.b32 %f4, %f3, 16, 31, -1;
  add.rn.f32 %f3, %f3, %f4;
  shfl.sync.bfly.b32 %f4, %f3, 8, 31, -1;
  add.rn.f32 %f3, %f3, %f4;
  shfl.sync.down.b32 %f4, %f3, 4, 31, -1;
  add.rn.f32 %f3, %f3, %f4;
  shfl.sync.down.b32 %f4, %f3, 2, 31, -1;
  add.rn.f32 %f3, %f3, %f4;
  shfl.sync.down.b32 %f4, %f3, 1, 31, -1;
  add.rn.f32 %f3, %f3, %f4;
  setp.ne.u32 %p3, %r0, 0;
  @%p3 exit;
  mul.wide.u32 %rd3, %r1, 4;
  add.s64 %rd3, %rd3, %rd0;
  st.global.f32 [%rd3], %f3;
  ret;""")

def block_sum(rng) -> Case:
  x = (rng.standard_normal(256 * 6) * np.exp2(rng.integers(-8, 8, 256 * 6))).astype(np.float32)
  return Case("block_sum", BLOCK_SUM, (6, 1, 1), (256, 1, 1), [x], [(np.float32, 6)])

def block_sum_reference(x: np.ndarray) -> np.ndarray:
  """The order block_sum adds in: a shared-memory tree down to 32 partial sums, then butterfly and down shuffles."""
  out = []
  for blk in x.reshape(-1, 256):
    p = blk.copy()
    for s in (128, 64, 32): p[:s] = p[:s] + p[s:2 * s]
    v = p[:32].copy()
    for b in (16, 8): v = v + v[np.arange(32) ^ b]
    for b in (4, 2, 1): v = v + np.where(np.arange(32) + b < 32, v[np.minimum(np.arange(32) + b, 31)], v)
    out.append(v[0])
  return np.array(out, np.float32)

def shfl_kernel(mode: str) -> str:
  return kernel(f"shfl_{mode}", 3, f"""
  ld.param.u64 %rd0, [data0];
  ld.param.u64 %rd1, [data1];
  ld.param.u64 %rd2, [data2];
  mov.u32 %r0, %tid.x;
  mov.u32 %r1, %ctaid.x;
  mul.wide.u32 %rd3, %r1, 8;
  add.s64 %rd3, %rd3, %rd2;
  ld.global.v2.u32 {{%r2, %r3}}, [%rd3];
  mad.lo.s32 %r4, %r0, 7, %r1;
  shfl.sync.{mode}.b32 %r5|%p0, %r4, %r2, %r3, -1;
  selp.u32 %r6, 1, 0, %p0;
  mad.lo.s32 %r7, %r1, 32, %r0;
  mul.wide.u32 %rd4, %r7, 4;
  add.s64 %rd5, %rd4, %rd0;
  st.global.u32 [%rd5], %r5;
  add.s64 %rd6, %rd4, %rd1;
  st.global.u32 [%rd6], %r6;
  ret;""")

SHFL_CASES = [(b, c) for b in (0, 1, 2, 3, 5, 8, 16, 31, 33, 70) for c in (0x1f, 0x0, 0x7, 0x181f, 0x1c03, 0x1f00, 0x101f, 0x0810, 0x1e1f, 0x1000)]
def shfl(mode: str):
  def case(rng) -> Case:
    bc = np.array(SHFL_CASES, np.uint32).reshape(-1)
    n = len(SHFL_CASES)
    return Case(f"shfl_{mode}", shfl_kernel(mode), (n, 1, 1), (32, 1, 1), [bc], [(np.uint32, 32 * n), (np.uint32, 32 * n)])
  return case

def shfl_reference(mode: str, n: int) -> tuple[np.ndarray, np.ndarray]:
  """The PTX ISA's shfl.sync pseudocode, lane by lane, for block k taking SHFL_CASES[k] and lane l holding 7 l + k."""
  vals, preds = [], []
  for k, (b, c) in enumerate(SHFL_CASES[:n]):
    for lane in range(32):
      bval, cval, seg = b & 31, c & 31, (c >> 8) & 31
      maxl, minl = (lane & seg) | (cval & ~seg), lane & seg
      j = {"up": lane - bval, "down": lane + bval, "bfly": lane ^ bval, "idx": minl | (bval & ~seg)}[mode]
      ok = j >= maxl if mode == "up" else j <= maxl
      vals.append(7 * (j if ok else lane) + k); preds.append(int(ok))
  return np.array(vals, np.uint32), np.array(preds, np.uint32)

# exited threads release a barrier (PTX `exit`): 40 of 64 threads stay and exchange values through shared memory
EXIT_BARRIER = kernel("exit_barrier", 2, """
  .shared .align 4 .u32 buf[64];
  ld.param.u64 %rd0, [data0];
  ld.param.u64 %rd1, [data1];
  mov.u32 %r0, %tid.x;
  setp.ge.u32 %p0, %r0, 40;
  @%p0 exit;
  mul.wide.u32 %rd2, %r0, 4;
  add.s64 %rd3, %rd2, %rd1;
  ld.global.u32 %r1, [%rd3];
  mov.u32 %r5, buf;
  shl.b32 %r2, %r0, 2;
  add.s32 %r7, %r5, %r2;
  st.shared.u32 [%r7], %r1;
  bar.sync 0;
  add.s32 %r3, %r0, 1;
  rem.u32 %r3, %r3, 40;
  shl.b32 %r4, %r3, 2;
  add.s32 %r6, %r5, %r4;
  ld.shared.u32 %r8, [%r6];
  add.s64 %rd4, %rd2, %rd0;
  st.global.u32 [%rd4], %r8;
  ret;""")

def exit_barrier(rng) -> Case:
  return Case("exit_barrier", EXIT_BARRIER, (1, 1, 1), (64, 1, 1), [rng.integers(0, 2**32, 64, dtype=np.uint32)], [(np.uint32, 64)])

# vector accesses and generic addressing of shared memory: out[i] = in[i ^ 1] through a shared tile
VECTORS = kernel("vectors", 2, """
  .shared .align 16 .b8 tile[512];
  ld.param.u64 %rd0, [data0];
  ld.param.u64 %rd1, [data1];
  mov.u32 %r0, %tid.x;
  mul.wide.u32 %rd2, %r0, 16;
  add.s64 %rd3, %rd2, %rd1;
  ld.global.nc.v4.f32 {%f0, %f1, %f2, %f3}, [%rd3];
  mov.u64 %rd4, tile;
  cvta.shared.u64 %rd5, %rd4;
  add.s64 %rd6, %rd5, %rd2;
  st.v4.f32 [%rd6], {%f0, %f1, %f2, %f3};
  bar.sync 0;
  mov.u32 %r1, tile;
  shl.b32 %r2, %r0, 4;
  add.s32 %r3, %r1, %r2;
  ld.shared.v2.f32 {%f4, %f5}, [%r3+8];
  ld.shared.v2.f32 {%f6, %f7}, [%r3];
  add.s64 %rd7, %rd2, %rd0;
  st.global.v2.f32 [%rd7], {%f5, %f4};
  st.global.v2.f32 [%rd7+8], {%f7, %f6};
  ret;""")

def vectors(rng) -> Case:
  return Case("vectors", VECTORS, (1, 1, 1), (32, 1, 1), [rng.standard_normal(128).astype(np.float32)], [(np.float32, 128)])

# ***** fused multiply-add *****

def fma_kernel(ty: str) -> str:
  reg, size = ("%f", 4) if ty == "f32" else ("%fd", 8)
  return kernel(f"fma_{ty}", 4, f"""
  ld.param.u64 %rd0, [data0];
  mov.u32 %r0, %tid.x;
  mov.u32 %r1, %ctaid.x;
  mad.lo.s32 %r2, %r1, 256, %r0;
  mul.wide.u32 %rd1, %r2, {size};
  ld.param.u64 %rd2, [data1];
  add.s64 %rd2, %rd2, %rd1;
  ld.global.{ty} {reg}0, [%rd2];
  ld.param.u64 %rd3, [data2];
  add.s64 %rd3, %rd3, %rd1;
  ld.global.{ty} {reg}1, [%rd3];
  ld.param.u64 %rd4, [data3];
  add.s64 %rd4, %rd4, %rd1;
  ld.global.{ty} {reg}2, [%rd4];
  fma.rn.{ty} {reg}3, {reg}0, {reg}1, {reg}2;
  add.s64 %rd5, %rd0, %rd1;
  st.global.{ty} [%rd5], {reg}3;
  ret;""")

def fma_inputs(rng, ty: str, n: int = 4096) -> list[np.ndarray]:
  """Random bit patterns (finite) with half the addends cancelling the product to its last bits."""
  ft, it = (np.float32, np.uint32) if ty == "f32" else (np.float64, np.uint64)
  bits = 8 * np.dtype(ft).itemsize
  a, b = (rng.integers(0, 2**bits, n, dtype=np.uint64).astype(it).view(ft) for _ in range(2))
  a, b = np.where(np.isfinite(a), a, 1.5).astype(ft), np.where(np.isfinite(b), b, -0.75).astype(ft)
  a = np.where(rng.random(n) < 0.5, a, (rng.standard_normal(n) * 2.0 ** rng.integers(-20, 20, n)).astype(ft))
  b = np.where(rng.random(n) < 0.5, b, (rng.standard_normal(n) * 2.0 ** rng.integers(-20, 20, n)).astype(ft))
  with np.errstate(all="ignore"):
    c = np.where(rng.random(n) < 0.5, -(a * b) * (1 + np.finfo(ft).eps * rng.integers(-3, 4, n)), rng.standard_normal(n)).astype(ft)
  return [a, b, np.where(np.isfinite(c), c, 1.0).astype(ft)]

def fma_case(ty: str):
  def case(rng) -> Case:
    ins = fma_inputs(rng, ty)
    return Case(f"fma_{ty}", fma_kernel(ty), (len(ins[0]) // 256, 1, 1), (256, 1, 1), ins, [(ins[0].dtype.type, len(ins[0]))])
  return case

# ***** tensor cores: each lane's fragment registers come from memory as-is, so the layout is the emulator's to apply *****

MMA_FORMS = {"f16": ("m16n8k16", "f16.f16", 4, 2), "bf16": ("m16n8k16", "bf16.bf16", 4, 2), "tf32": ("m16n8k8", "tf32.tf32", 4, 2)}
def mma_kernel(ty: str) -> str:
  shape, types, na, nb = MMA_FORMS[ty]
  loads = "\n".join(f"  ld.global.u32 %r{10 + i}, [%rd5+{4 * i}];" for i in range(na))
  loads += "\n" + "\n".join(f"  ld.global.u32 %r{20 + i}, [%rd6+{4 * i}];" for i in range(nb))
  loads += "\n" + "\n".join(f"  ld.global.f32 %f{10 + i}, [%rd7+{4 * i}];" for i in range(4))
  a, b = ", ".join(f"%r{10 + i}" for i in range(na)), ", ".join(f"%r{20 + i}" for i in range(nb))
  return kernel(f"mma_{ty}", 4, f"""
  ld.param.u64 %rd0, [data0];
  ld.param.u64 %rd1, [data1];
  ld.param.u64 %rd2, [data2];
  ld.param.u64 %rd3, [data3];
  mov.u32 %r0, %tid.x;
  mov.u32 %r1, %ctaid.x;
  mad.lo.s32 %r2, %r1, 128, %r0;
  mul.wide.u32 %rd4, %r2, 16;
  add.s64 %rd5, %rd4, %rd1;
  mul.wide.u32 %rd8, %r2, {4 * nb};
  add.s64 %rd6, %rd8, %rd2;
  add.s64 %rd7, %rd4, %rd3;
{loads}
  mma.sync.aligned.{shape}.row.col.f32.{types}.f32 {{%f0, %f1, %f2, %f3}}, {{{a}}}, {{{b}}}, {{%f10, %f11, %f12, %f13}};
  add.s64 %rd9, %rd4, %rd0;
  st.global.v4.f32 [%rd9], {{%f0, %f1, %f2, %f3}};
  ret;""")

def mma_inputs(rng, ty: str, warps: int) -> list[np.ndarray]:
  """Per lane: A's and B's registers (bits of f16/bf16 pairs or tf32 in f32, exponents spread over a wide range, some
  subnormal f16), and C; a quarter of the warps get C = -(A B) rounded, so the sums cancel."""
  n = warps * 32
  def vals(count, spread):
    return rng.standard_normal(count) * np.exp2(rng.integers(-spread, spread + 1, count))
  if ty == "f16": a, b = (vals(n * k, 12).astype(np.float16).view(np.uint16) for k in (8, 4))
  elif ty == "bf16": a, b = ((vals(n * k, 30).astype(np.float32).view(np.uint32) >> 16).astype(np.uint16) for k in (8, 4))
  else: a, b = (vals(n * k, 30).astype(np.float32).view(np.uint32) for k in (4, 2))
  c = vals(n * 4, 20).astype(np.float32)
  c[: n * 4 // 4] = 0
  a32 = a.view(np.uint32) if a.dtype == np.uint16 else a
  b32 = b.view(np.uint32) if b.dtype == np.uint16 else b
  return [a32.astype(np.uint32), b32.astype(np.uint32), c]

def mma_case(ty: str, warps: int = 64):
  def case(rng) -> Case:
    ins = mma_inputs(rng, ty, warps)
    return Case(f"mma_{ty}", mma_kernel(ty), (warps // 4, 1, 1), (128, 1, 1), ins, [(np.float32, warps * 128)])
  return case

LDMATRIX_FORMS = [("x1", ""), ("x2", ""), ("x4", ""), ("x1", ".trans"), ("x2", ".trans"), ("x4", ".trans")]
def ldmatrix_kernel() -> str:
  body, reg = [], 10
  for num, trans in LDMATRIX_FORMS:
    k = int(num[1:])
    regs = ", ".join(f"%r{reg + i}" for i in range(k))
    body.append(f"  ldmatrix.sync.aligned.m8n8.{num}{trans}.shared.b16 {{{regs}}}, [%r5];")
    reg += k
  stores = "\n".join(f"  st.global.u32 [%rd6+{4 * i}], %r{10 + i};" for i in range(reg - 10))
  return kernel("ldmatrix", 3, f"""
  .shared .align 16 .b8 tile[512];
  ld.param.u64 %rd0, [data0];
  ld.param.u64 %rd1, [data1];
  ld.param.u64 %rd2, [data2];
  mov.u32 %r0, %tid.x;
  mov.u32 %r1, %ctaid.x;
  mad.lo.s32 %r2, %r1, 32, %r0;
  mul.wide.u32 %rd3, %r2, 16;
  add.s64 %rd3, %rd3, %rd1;
  ld.global.v4.u32 {{%r30, %r31, %r32, %r33}}, [%rd3];
  mov.u32 %r3, tile;
  shl.b32 %r4, %r0, 4;
  add.s32 %r4, %r4, %r3;
  st.shared.v4.u32 [%r4], {{%r30, %r31, %r32, %r33}};
  bar.sync 0;
  mul.wide.u32 %rd4, %r2, 4;
  add.s64 %rd4, %rd4, %rd2;
  ld.global.u32 %r5, [%rd4];
  add.s32 %r5, %r5, %r3;
{chr(10).join(body)}
  mul.wide.u32 %rd6, %r2, {4 * (reg - 10)};
  add.s64 %rd6, %rd6, %rd0;
{stores}
  ret;""")

def ldmatrix_case(rng) -> Case:
  blocks = 4
  data = rng.integers(0, 2**16, blocks * 256, dtype=np.uint16)
  rows = np.concatenate([rng.permutation(32) * 16 for _ in range(blocks)]).astype(np.uint32)   # each lane's row: any of the 32
  return Case("ldmatrix", ldmatrix_kernel(), (blocks, 1, 1), (32, 1, 1), [data, rows], [(np.uint32, blocks * 32 * 14)])

def ldmatrix_reference(data: np.ndarray, rows: np.ndarray) -> np.ndarray:
  """The PTX ISA's ldmatrix: lanes 8m..8m+7 address matrix m's rows; lane l gets row l >> 2, columns 2 (l % 4) + {0, 1}."""
  out = []
  for blk in range(len(rows) // 32):
    tile, r = data[blk * 256:(blk + 1) * 256].reshape(32, 8), rows[blk * 32:(blk + 1) * 32] // 16
    for lane in range(32):
      for num, trans in LDMATRIX_FORMS:
        for m in range(int(num[1:])):
          mat = tile[r[8 * m:8 * m + 8]]
          if trans: mat = mat.T
          lo, hi = mat[lane >> 2, 2 * (lane & 3)], mat[lane >> 2, 2 * (lane & 3) + 1]
          out.append(int(lo) | int(hi) << 16)
  return np.array(out, np.uint32)

CASES = {"block_sum": block_sum, "shfl_up": shfl("up"), "shfl_down": shfl("down"), "shfl_bfly": shfl("bfly"),
         "shfl_idx": shfl("idx"), "exit_barrier": exit_barrier, "vectors": vectors, "fma_f32": fma_case("f32"),
         "fma_f64": fma_case("f64"), "mma_f16": mma_case("f16"), "mma_bf16": mma_case("bf16"), "mma_tf32": mma_case("tf32"),
         "ldmatrix": ldmatrix_case}

# ***** running *****

def run_emulated(case: Case) -> list[np.ndarray]:
  from tinygrad_nv.emulator import EmulatedKernel, EmulatedMemory
  mem = EmulatedMemory()
  outs = [mem.alloc(np.dtype(t).itemsize * n) for t, n in case.outputs]
  ins = [mem.alloc(x.nbytes) for x in case.inputs]
  for a, x in zip(ins, case.inputs): mem.span(a, x.nbytes)[:] = x.view(np.uint8)
  EmulatedKernel(case.ptx, case.name, mem)({f"data{i}": a for i, a in enumerate(outs + ins)}, case.grid, case.block)
  return [mem.span(a, np.dtype(t).itemsize * n).view(t).copy() for a, (t, n) in zip(outs, case.outputs)]

def run_cuda(case: Case, driver) -> list[np.ndarray]:
  """The case on a GPU through the NV driver (the driver JIT-compiles the PTX)."""
  from tinygrad_nv.driver import CUDAProgram
  outs = [driver.mem_alloc(np.dtype(t).itemsize * n) for t, n in case.outputs]
  ins = [driver.mem_alloc(x.nbytes) for x in case.inputs]
  for a, (t, n) in zip(outs, case.outputs): driver.copyin(a, memoryview(np.zeros(n, t)).cast("B"))
  for a, x in zip(ins, case.inputs): driver.copyin(a, memoryview(np.ascontiguousarray(x)).cast("B"))
  prog = CUDAProgram(driver, case.name, case.ptx, case.ptx.encode() + b"\0")
  prog(*outs, *ins, global_size=case.grid, local_size=case.block)
  driver.synchronize()
  res = []
  for a, (t, n) in zip(outs, case.outputs):
    buf = np.zeros(n, t)
    driver.copyout(memoryview(buf).cast("B"), a)
    res.append(buf)
  for a in outs + ins: driver.mem_free(a)
  return res

KEPT = 2048   # elements kept of each output in a recorded table (the first ones)
def encode(x: np.ndarray) -> str: return base64.b64encode(zlib.compress(x[:KEPT].tobytes(), 9)).decode()
def decode(text: str, dtype) -> np.ndarray: return np.frombuffer(zlib.decompress(base64.b64decode(text)), dtype)

def record(path: str) -> None:
  """Every case on GPU 0 (seed 0): the first KEPT elements of each output, with the GPU's name and driver."""
  import ctypes
  from tinygrad_nv.driver import NVDriver
  d = NVDriver(0)
  name, version = ctypes.create_string_buffer(256), ctypes.c_int()
  d.lib.cuDeviceGetName(name, 256, 0)
  d.lib.cuDriverGetVersion(ctypes.byref(version))
  table = {"gpu": name.value.decode(), "arch": d.arch, "cuda_driver_api": version.value, "cases": {}}
  for key, make in CASES.items():
    table["cases"][key] = [encode(o) for o in run_cuda(make(np.random.default_rng(0)), d)]
    print(key, "recorded")
  with open(path, "w") as f: json.dump(table, f, indent=0)

if __name__ == "__main__": record(sys.argv[1])
