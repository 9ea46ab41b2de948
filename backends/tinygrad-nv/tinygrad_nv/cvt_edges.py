"""The float->int conversion edge table: raw PTX `cvt.rzi.<int>.<float>` over edge inputs for every integer width, run on
the emulator or on a GPU, in the format of tests/data/h100_cvt_rzi.json (the H100's results, which the emulator must give)."""
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

def on_emulator() -> dict:
  """The table as the PTX emulator computes it (no device needed)."""
  from tinygrad_nv.emulator import EmulatedKernel, EmulatedMemory
  mem, (f32, f64) = EmulatedMemory(), inputs()
  out, a, b = mem.alloc(8 * len(PAIRS) * len(INPUTS)), mem.alloc(f32.nbytes), mem.alloc(f64.nbytes)
  mem.span(a, f32.nbytes)[:] = f32.view(np.uint8)
  mem.span(b, f64.nbytes)[:] = f64.view(np.uint8)
  EmulatedKernel(kernel(), "cvt_edges", mem)({"data0": out, "data1": a, "data2": b}, (1, 1, 1), (len(INPUTS), 1, 1))
  return table(mem.span(out, 8 * len(PAIRS) * len(INPUTS)).view(np.uint64).copy(), "cvt.rzi.<dst>.<src> on the tinygrad-nv PTX emulator")

def on_device(device: str = "NV") -> dict:
  """The table as an opened NV device computes it: the kernel assembled by its assembler, loaded and launched by its driver."""
  from tinycore.dtype import dtypes
  from tinycore.runtime.device import Buffer, Device
  dev, (f32, f64) = Device[device], inputs()
  out = Buffer(device, len(PAIRS) * len(INPUTS), dtypes.uint64).ensure_allocated()
  a, b = Buffer(device, len(INPUTS), dtypes.float32).copyin(f32.data), Buffer(device, len(INPUTS), dtypes.float64).copyin(f64.data)
  prog = dev.driver.load("cvt_edges", dev.assembler.assemble(kernel(getattr(dev.renderer, "arch", "sm_90"))), None)
  prog(out._buf, a._buf, b._buf, global_size=(1, 1, 1), local_size=(len(INPUTS), 1, 1), wait=True)
  what = f"cvt.rzi.<dst>.<src> on {device} ({getattr(dev.driver, 'description', '') or dev.driver.__class__.__name__})"
  return table(out.numpy(), what)

def differences(got: dict, want: dict) -> list[str]:
  """Every (pair, input) where two tables disagree, as readable lines."""
  return [f"{p} of {x}: {g} where {w}" for p in PAIRS for x, g, w in zip(INPUTS, got["results"][p], want["results"][p]) if g != w]
