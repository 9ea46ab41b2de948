"""Raw PTX over edge inputs, run on the emulator or on a GPU: the float->int conversion table (`cvt.rzi.<int>.<float>`
for every integer width, in the format of tests/data/h100_cvt_rzi.json, the H100's results the emulator must give), and
the .approx.f32 instructions over a sweep of inputs (what the GPU gives, against the exact values)."""
from __future__ import annotations
import numpy as np

INPUTS = ["nan", "inf", "-inf", "1e+30", "-1e+30", "-1.5", "2.5", "3000000000.0", "-3000000000.0", "255.5", "65535.9", "-129.0",
          "1e+19", "-1e+19", "0.0", "-0.0"]
INTS = ("s8", "u8", "s16", "u16", "s32", "u32", "s64", "u64")
PAIRS = [f"{i}.{f}" for f in ("f32", "f64") for i in INTS]   # "<destination>.<source>", the table's keys

def kernel(arch: str = "sm_90") -> str:
  """One thread per input: it converts its f32 input (data1) and its f64 input (data2) to every integer width, each result
  widened into 64 bits (sign- or zero-extended, as cvt does into a wider register) at data0[pair][thread]."""
  n = len(INPUTS)
  body = [f"\tcvt.rzi.{pair} %rd6, {'%f0' if pair.endswith('f32') else '%fd0'};\n\tst.global.b64 [%rd5+{8 * n * k}], %rd6;"
          for k, pair in enumerate(PAIRS)]
  return "\n".join([
    "// launch: groups", ".version 8.0", f".target {arch}", ".address_size 64",
    ".visible .entry cvt_edges(.param .u64 data0, .param .u64 data1, .param .u64 data2)", "{",
    "\t.reg .b32 %r<1>;", "\t.reg .b64 %rd<7>;", "\t.reg .f32 %f<1>;", "\t.reg .f64 %fd<1>;",
    "\tld.param.u64 %rd0, [data0];", "\tld.param.u64 %rd1, [data1];", "\tld.param.u64 %rd2, [data2];",
    "\tcvta.to.global.u64 %rd0, %rd0;", "\tcvta.to.global.u64 %rd1, %rd1;", "\tcvta.to.global.u64 %rd2, %rd2;",
    "\tmov.u32 %r0, %tid.x;",
    "\tmul.wide.u32 %rd3, %r0, 4;", "\tadd.s64 %rd3, %rd3, %rd1;", "\tld.global.f32 %f0, [%rd3];",
    "\tmul.wide.u32 %rd4, %r0, 8;", "\tadd.s64 %rd5, %rd4, %rd0;", "\tadd.s64 %rd4, %rd4, %rd2;", "\tld.global.f64 %fd0, [%rd4];",
    *body, "\tret;", "}", ""])

def inputs() -> tuple[np.ndarray, np.ndarray]:
  return np.array([float(x) for x in INPUTS], np.float32), np.array([float(x) for x in INPUTS], np.float64)

def table(raw: np.ndarray, what: str) -> dict:
  """The kernel's output (uint64 [pair][input]) as the table: each result read as its destination type."""
  raw = raw.reshape(len(PAIRS), len(INPUTS))
  return {"what": what, "inputs": INPUTS,
          "results": {p: [int(v) for v in (raw[k].view(np.int64) if p[0] == "s" else raw[k])] for k, p in enumerate(PAIRS)}}

def run(ptx: str, name: str, ins: list[np.ndarray], out_bytes: int, grid, block, device: str | None = None) -> np.ndarray:
  """Launches one raw PTX kernel (parameters: the output, then the inputs) on the emulator (device None) or on an opened
  NV device (assembled by its assembler, loaded and launched by its driver); the output's bytes."""
  if device is None:
    from tinygrad_nv.emulator import EmulatedKernel, EmulatedMemory
    mem = EmulatedMemory()
    addrs = [mem.alloc(out_bytes)] + [mem.alloc(a.nbytes) for a in ins]
    for addr, a in zip(addrs[1:], ins): mem.span(addr, a.nbytes)[:] = a.view(np.uint8)
    EmulatedKernel(ptx, name, mem)({f"data{i}": a for i, a in enumerate(addrs)}, grid, block)
    return mem.span(addrs[0], out_bytes).copy()
  from tinycore.dtype import dtypes
  from tinycore.runtime.device import Buffer, Device
  dev = Device[device]
  bufs = [Buffer(device, out_bytes, dtypes.uint8).ensure_allocated()] + [Buffer(device, a.nbytes, dtypes.uint8).copyin(a.view(np.uint8).data) for a in ins]
  dev.driver.load(name, dev.assembler.assemble(ptx), None)(*[b._buf for b in bufs], global_size=grid, local_size=block, wait=True)
  return bufs[0].numpy()

def on_emulator() -> dict:
  """The table as the PTX emulator computes it (no device needed)."""
  out = run(kernel(), "cvt_edges", list(inputs()), 8 * len(PAIRS) * len(INPUTS), (1, 1, 1), (len(INPUTS), 1, 1))
  return table(out.view(np.uint64), "cvt.rzi.<dst>.<src> on the tinygrad-nv PTX emulator")

def arch(device: str | None) -> str:
  """The arch kernels are written for: the device's renderer's (NV_ARCH), sm_90 on the emulator."""
  if device is None: return "sm_90"
  from tinycore.runtime.device import Device
  return getattr(Device[device].renderer, "arch", "sm_90")

def on_device(device: str = "NV") -> dict:
  """The table as an opened NV device computes it."""
  from tinycore.runtime.device import Device
  drv = Device[device].driver
  out = run(kernel(arch(device)), "cvt_edges", list(inputs()), 8 * len(PAIRS) * len(INPUTS), (1, 1, 1), (len(INPUTS), 1, 1), device)
  return table(out.view(np.uint64), f"cvt.rzi.<dst>.<src> on {device} ({getattr(drv, 'description', '') or drv.__class__.__name__})")

APPROX = ("ex2", "lg2")

def approx_kernel(op: str, arch: str = "sm_90") -> str:
  """One thread per element: data0[i] = <op>.approx.f32(data1[i]), in blocks of 256 threads."""
  return "\n".join([
    "// launch: groups", ".version 8.0", f".target {arch}", ".address_size 64",
    f".visible .entry approx_{op}(.param .u64 data0, .param .u64 data1)", "{",
    "\t.reg .b32 %r<3>;", "\t.reg .b64 %rd<4>;", "\t.reg .f32 %f<2>;",
    "\tld.param.u64 %rd0, [data0];", "\tld.param.u64 %rd1, [data1];", "\tcvta.to.global.u64 %rd0, %rd0;", "\tcvta.to.global.u64 %rd1, %rd1;",
    "\tmov.u32 %r0, %ctaid.x;", "\tmov.u32 %r1, %ntid.x;", "\tmov.u32 %r2, %tid.x;", "\tmad.lo.s32 %r0, %r0, %r1, %r2;",
    "\tmul.wide.u32 %rd2, %r0, 4;", "\tadd.s64 %rd3, %rd2, %rd1;", "\tld.global.f32 %f0, [%rd3];",
    f"\t{op}.approx.f32 %f1, %f0;", "\tadd.s64 %rd3, %rd2, %rd0;", "\tst.global.f32 [%rd3], %f1;", "\tret;", "}", ""])

def approx_inputs(per_sign: int = 1 << 13) -> np.ndarray:
  """Inputs spread evenly in bit pattern over every finite f32 of each sign (every binade, subnormals included), plus the
  points where the exact result is an f32 (integers for ex2, powers of two for lg2); a multiple of 256 in all."""
  pats = np.linspace(0, 0x7F7FFFFF, per_sign, dtype=np.float64).astype(np.uint32)
  x = np.concatenate([pats, pats | np.uint32(1 << 31)]).view(np.float32)
  exact = np.concatenate([np.arange(-149, 128), 2.0 ** np.arange(-149, 128)]).astype(np.float32)
  x = np.concatenate([x, exact])
  return np.concatenate([x, np.zeros(-len(x) % 256, np.float32)])

def approx_run(op: str, x: np.ndarray, device: str | None = None) -> np.ndarray:
  return run(approx_kernel(op, arch(device)), f"approx_{op}", [x], x.nbytes, (len(x) // 256, 1, 1), (256, 1, 1), device).view(np.float32)

def approx_errors(op: str, x: np.ndarray, got: np.ndarray) -> dict:
  """How far results are from the exact values: the largest error in ulps of the exact value (ex2) or against the ISA's
  bound (lg2: 2**-22 absolute in (0.5, 2), relative elsewhere), and the inputs with an f32 exact result not given exactly."""
  x64 = x.astype(np.float64)
  with np.errstate(all="ignore"):
    exact = np.exp2(x64) if op == "ex2" else np.log2(x64)
    e32 = exact.astype(np.float32)   # the correctly rounded result: infinities where it overflows
    fin = np.isfinite(e32) & np.isfinite(got)
    err = np.abs(got.astype(np.float64) - exact)
    scale = np.spacing(np.abs(e32)).astype(np.float64) if op == "ex2" else np.where((x64 > 0.5) & (x64 < 2), 2.0**-22, 2.0**-22 * np.abs(exact))
    rel = np.where(fin & (scale > 0), err / np.where(scale > 0, scale, 1), 0)
  return {"worst": float(rel.max()), "unit": "ulp" if op == "ex2" else "of the ISA's bound", "at": float(x[int(rel.argmax())]),
          "inexact_where_representable": int((fin & (e32.astype(np.float64) == exact) & (got.astype(np.float64) != exact)).sum()),
          "specials_differ": int((~fin & ~((np.isnan(e32) & np.isnan(got)) | (e32 == got))).sum())}

def differences(got: dict, want: dict) -> list[str]:
  """Every (pair, input) where two tables disagree, as readable lines."""
  return [f"{p} of {x}: {g} where {w}" for p in PAIRS for x, g, w in zip(INPUTS, got["results"][p], want["results"][p]) if g != w]
