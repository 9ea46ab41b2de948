"""QCOM's renderer: linear UOps -> OpenCL C for Adreno (half, float64 only with cl_khr_fp64, 2-D images), with the core's semantics."""
from __future__ import annotations
import math, os, re
from dataclasses import dataclass
from tinycore.dtype import DType, dtypes, truncate
from tinycore.uop import UOp, Ops, GroupOp
from tinycore.renderer import Renderer
from tinycore.rewrite import PatternMatcher, UPat, graph_substitute
from tinycore.uop import split_terms
from tinycore.runtime.errors import UnsupportedError

# OpenCL C's names for each dtype, and the unsigned type of the same width (wrapping integer math is done unsigned:
# signed overflow is undefined in OpenCL C as in C). bool lives in memory as uchar: bool pointers cannot be kernel arguments.
CL_TYPES = {dtypes.bool: "bool", dtypes.int8: "char", dtypes.uint8: "uchar", dtypes.int16: "short", dtypes.uint16: "ushort",
            dtypes.int32: "int", dtypes.uint32: "uint", dtypes.int64: "long", dtypes.uint64: "ulong", dtypes.float16: "half",
            dtypes.float32: "float", dtypes.float64: "double"}
UNSIGNED = {dtypes.int8: "uchar", dtypes.int16: "ushort", dtypes.int32: "uint", dtypes.int64: "ulong"}
EXACT_OPS = (Ops.NEG, Ops.MAX, Ops.TRUNC, Ops.WHERE)   # float results that are already values of the operands' type
KERNEL_HEADER = "// tinycore-qcom"   # the header lines: "// tinycore-qcom NAME", "// writes P...", "// vars TYPE...", "// image P DTYPE WxH read|write"...

@dataclass(frozen=True)
class ImageParam:
  """A kernel parameter bound as an image2d_t: one texel (CL_R) per element, element i at (i % width, i // width)."""
  param: int
  dtype: DType
  width: int
  height: int
  access: str   # "read" or "write"

@dataclass(frozen=True)
class KernelInfo:
  """What the driver needs to launch a kernel, read from its header: parameters written, launch variables' types, images."""
  name: str
  writes: tuple[int, ...]
  vars: tuple[str, ...]
  images: tuple[ImageParam, ...]

def kernel_info(src: str) -> KernelInfo:
  """The header of a kernel this renderer wrote; ValueError for any other text."""
  lines = src.split("\n")
  m = [re.fullmatch(rf"{KERNEL_HEADER} (\w+)", lines[0]), *(re.fullmatch(rf"// {k}((?: \w+)*)", l) for k, l in zip(("writes", "vars"), lines[1:3]))]
  if not all(m): raise ValueError("not a tinycore QCOM kernel: its header lines are missing")
  images = []
  for line in lines[3:]:
    if not (im := re.fullmatch(r"// image (\d+) (\w+) (\d+)x(\d+) (read|write)", line)): break
    images.append(ImageParam(int(im.group(1)), dtypes.fields()[im.group(2)], int(im.group(3)), int(im.group(4)), im.group(5)))
  return KernelInfo(m[0].group(1), tuple(int(p) for p in m[1].group(1).split()), tuple(m[2].group(1).split()), tuple(images))

# ***** images: index math -> image coordinates, as a rewrite of the kernel before linearizing *****

def image_shape(size: int, accesses: list[UOp], max_w: int, max_h: int) -> tuple[int, int] | None:
  """(width, height) of an image holding `size` elements, width * height == size, within the limits: the row stride
  the index math uses when one divides the size (a 2-D tensor's rows land on image rows, and `i % w`, `i // w` fold away),
  else the widest divisor that fits. None when no shape fits (a prime size past the width, say): it stays a buffer."""
  if size <= 0: return None
  strides = sorted({k for a in accesses for k in split_terms(a)[0].values() if 1 < k <= max_w and size % k == 0}, reverse=True)
  divisors = [w for w in range(min(size, max_w), 0, -1) if size % w == 0]
  return next(((w, size // w) for w in strides + divisors if size // w <= max_h), None)

def to_images(ren: OpenCLRenderer, sink: UOp) -> UOp | None:
  """float32 (and, with cl_khr_fp16's read_imageh/write_imageh, float16) parameters a kernel only reads or only writes become
  images (INDEX(buf, x, y), arg = the ImageParam), as many as the device binds (read and write image limits); the rest, and
  every shape past the limits, stay buffers."""
  if not ren.images: return None
  order = sink.toposort()
  if any(u.op is Ops.INDEX and len(u.src) == 3 for u in order): return None   # already rewritten
  uses: dict[UOp, dict[str, list[UOp]]] = {}
  for u in order:
    if u.op in (Ops.LOAD, Ops.STORE) and u.src[0].op is Ops.INDEX and u.src[0].src[0].op is Ops.DEFINE_GLOBAL:
      uses.setdefault(u.src[0].src[0], {"read": [], "write": []})["read" if u.op is Ops.LOAD else "write"].append(u.src[0])
  sub: dict[UOp, UOp] = {}
  budget = {"read": ren.max_read_images, "write": ren.max_write_images}
  image_dtypes = (dtypes.float32, dtypes.float16) if ren.fp16 else (dtypes.float32,)
  for buf in sorted(uses, key=lambda b: b.arg):
    access = [k for k, v in uses[buf].items() if v]
    if len(access) != 1 or buf.dtype.base.scalar not in image_dtypes or buf.dtype.base.count != 1 or budget[access[0]] == 0: continue
    idxs = uses[buf][access[0]]
    if (shape := image_shape(buf.dtype.size, [i.src[1] for i in idxs], ren.image_max[0], ren.image_max[1])) is None: continue
    budget[access[0]] -= 1
    img = ImageParam(buf.arg, buf.dtype.base.scalar, shape[0], shape[1], access[0])
    for idx in idxs:
      i = idx.src[1]
      sub[idx] = UOp(Ops.INDEX, idx.dtype, (buf, (i % shape[0]).simplify(), (i // shape[0]).simplify()), img)
  return graph_substitute(sink, sub) if sub else None

# ***** constants *****

def render_const(v, dt: DType, fp16: bool = True) -> str:
  if dt == dtypes.bool: return "true" if v else "false"
  if dtypes.is_int(dt):
    v = int(v)
    bits = 8 * dt.itemsize
    v = v & ((1 << bits) - 1)
    if not dtypes.is_unsigned(dt) and v >= 1 << (bits - 1): v -= 1 << bits
    if not dtypes.is_unsigned(dt) and v == -(1 << (bits - 1)): return f"(({CL_TYPES[dt]})({v + 1}{'L' if bits == 64 else ''} - 1))"
    suffix = {dtypes.uint32: "u", dtypes.int64: "L", dtypes.uint64: "UL"}.get(dt, "")
    return f"(({CL_TYPES[dt]}){v}{suffix})" if bits < 32 else f"{v}{suffix}" if v >= 0 else f"({v}{suffix})"
  v = float(truncate(dt, v))
  if math.isnan(v): text = "NAN"
  elif math.isinf(v): text = "INFINITY" if v > 0 else "(-INFINITY)"
  else: text = v.hex() + ("" if dt == dtypes.float64 else "f")   # hex floats are exact
  if dt == dtypes.float64 and not math.isfinite(v): return f"((double){text})"
  if dt == dtypes.float16 and fp16: return f"((half){text})"
  return f"({text})" if text.startswith("-") else text

# ***** the renderer *****

class OpenCLRenderer(Renderer):
  """OpenCL C for Adreno. Defaults describe an Adreno GPU (native half through cl_khr_fp16, no float64, images with the
  OpenCL 1.2 minimum limits); the driver calls `use_device` with what the opened device reports. Rendering needs no device."""
  device = "QCOM"
  global_dims = 3
  global_max = (2**31 - 1,) * 3
  has_local = True                 # SPECIAL lidxN are get_local_id(N): global_size then counts workgroups
  has_shared = True                # DEFINE_LOCAL: __local arrays; BARRIER: barrier(CLK_LOCAL_MEM_FENCE)
  shared_max = 32 << 10            # OpenCL 1.2's guaranteed minimum CL_DEVICE_LOCAL_MEM_SIZE (Adreno: 32 KiB)
  local_max = (1024, 1024, 64)
  max_threads_per_group = 1024
  index_bits = 64
  upcast_max = 4

  def __init__(self, fp16: bool = True, fp64: bool = False, images: bool | None = None, image_max: tuple[int, int] = (8192, 8192),
               max_read_images: int = 128, max_write_images: int = 8):
    """fp16: native half arithmetic (cl_khr_fp16), else float math rounded to half; fp64: double (cl_khr_fp64). The image
    limits default to OpenCL 1.2's guaranteed minimums; `for_device` reads them from a device."""
    self.fp16, self.fp64 = fp16, fp64
    # QCOM_IMAGE=1: float tensors a kernel only reads or only writes go through image2d_t (the texture cache on Adreno)
    self.images = bool(int(os.environ.get("QCOM_IMAGE", "0"))) if images is None else images
    self.image_max, self.max_read_images, self.max_write_images = image_max, max_read_images, max_write_images
    self.extra_matcher = PatternMatcher([(UPat(Ops.SINK, name="sink"), lambda sink: to_images(self, sink))])
    self.supported_dtypes = frozenset(d for d in CL_TYPES if d != dtypes.float64 or fp64)

  @classmethod
  def for_device(cls, info) -> OpenCLRenderer:
    """The target as an OpenCL device describes itself (half and double by extension, image limits); None: an Adreno GPU."""
    if info is None: return cls()
    return cls("cl_khr_fp16" in info.extensions, "cl_khr_fp64" in info.extensions, None if info.has_images else False,
               info.image_max, info.max_read_images, info.max_write_images)

  def render(self, name: str, uops: list[UOp]) -> str: return _Kernel(self, re.sub(r"\W", "_", name), uops).source()

HALF_HELPERS = {  # half without cl_khr_fp16: values in float registers, rounded to half through vstore_half_rte
  "tc_half": "inline float tc_half(float x) { ushort h; vstore_half_rte(x, 0, (half*)&h); return vload_half(0, (half*)&h); }",
  "tc_half_d": "inline float tc_half_d(double x) { ushort h; vstore_half_rte(x, 0, (half*)&h); return vload_half(0, (half*)&h); }",
  # a half NaN keeps its bits through a float (vload_half quiets signalling ones, vstore_half makes every NaN 0x7fff): a
  # bitcast of a half, or a half copied, keeps them
  "tc_half_bits": "inline ushort tc_half_bits(float x) { uint b = as_uint(x), m = (b >> 13) & 0x3ff; ushort h;\n"
                  "  if (isnan(x)) return (ushort)(((b >> 16) & 0x8000) | 0x7c00 | (m ? m : 0x200));\n"
                  "  vstore_half_rte(x, 0, (half*)&h); return h; }",
  "tc_half_from_bits": "inline float tc_half_from_bits(ushort h) {\n"
                       "  if ((h & 0x7fff) > 0x7c00) return as_float(((uint)(h & 0x8000) << 16) | 0x7f800000u | ((uint)(h & 0x3ff) << 13));\n"
                       "  return vload_half(0, (half*)&h); }",
}

class _Kernel:
  """The state of rendering one kernel: names given to values, the body, the indentation, the features it uses."""
  def __init__(self, ren: OpenCLRenderer, name: str, uops: list[UOp]):
    self.ren, self.name, self.uops = ren, name, uops
    self.names: dict[UOp, str] = {}
    self.lines: list[str] = []
    self.depth = 1
    self.images = {u.src[0].arg: u.arg for u in uops if u.op is Ops.INDEX and len(u.src) == 3}
    self.grouped = any(u.op is Ops.SPECIAL and u.arg.startswith("lidx") for u in uops)

  def reg(self, dt: DType) -> str:
    """The type a value of dt is held in: half is float when the device has no half arithmetic."""
    if dt.count > 1: raise UnsupportedError(f"backend QCOM: the OpenCL renderer has no vector values ({dt})")
    if dt.scalar not in self.ren.supported_dtypes: raise UnsupportedError(f"backend QCOM does not support dtype {dt.scalar.name} on this device")
    return "float" if dt == dtypes.float16 and not self.ren.fp16 else CL_TYPES[dt.scalar]
  def line(self, s: str) -> None: self.lines.append("  " * self.depth + s)
  def ref(self, u: UOp) -> str: return render_const(u.arg, u.dtype, self.ren.fp16) if u.op is Ops.CONST else self.names[u]
  def bind(self, u: UOp, expr: str) -> None:
    self.names[u] = f"v{len(self.names)}"
    self.line(f"{self.reg(u.dtype)} {self.names[u]} = {expr};")

  def params(self) -> list[str]:
    out = []
    for u in sorted((u for u in self.uops if u.op is Ops.DEFINE_GLOBAL), key=lambda u: u.arg):
      dt, p = u.dtype.base.scalar, u.arg
      if p in self.images: out.append(f"{self.images[p].access}_only image2d_t data{p}")
      else: out.append(f"__global {'uchar' if dt == dtypes.bool else CL_TYPES[dt]}* data{p}")
      self.names[u] = f"data{p}"
    for v in sorted((u for u in self.uops if u.op is Ops.DEFINE_VAR), key=lambda v: v.arg):
      self.names[v] = "var_" + re.sub(r"\W", "_", v.arg[0])
      out.append(f"{self.reg(v.dtype)} {self.names[v]}")
    return out

  def source(self) -> str:
    params = self.params()
    for u in self.uops:
      if u not in self.names and u.op is not Ops.CONST: self.emit(u)
    body = "\n".join(self.lines)
    writes = sorted({u.src[0].src[0].arg for u in self.uops if u.op is Ops.STORE and u.src[0].src[0].op is Ops.DEFINE_GLOBAL})
    var_types = [self.reg(v.dtype) for v in sorted((u for u in self.uops if u.op is Ops.DEFINE_VAR), key=lambda v: v.arg)]
    head = [f"{KERNEL_HEADER} {self.name}", " ".join(["// writes", *map(str, writes)]), " ".join(["// vars", *var_types])]
    head += [f"// image {i.param} {i.dtype.name} {i.width}x{i.height} {i.access}" for i in sorted(self.images.values(), key=lambda i: i.param)]
    head.append("#pragma OPENCL FP_CONTRACT OFF")   # a*b+c stays two roundings, as the reference semantics (no fma contraction)
    uses_half = any(u.dtype.scalar == dtypes.float16 or (u.op is Ops.DEFINE_GLOBAL and u.dtype.base.scalar == dtypes.float16) for u in self.uops)
    if uses_half and self.ren.fp16: head.append("#pragma OPENCL EXTENSION cl_khr_fp16 : enable")
    if any(u.dtype.scalar == dtypes.float64 or (u.op is Ops.DEFINE_GLOBAL and u.dtype.base.scalar == dtypes.float64) for u in self.uops):
      head.append("#pragma OPENCL EXTENSION cl_khr_fp64 : enable")
    if self.images: head.append("__constant sampler_t smp = CLK_NORMALIZED_COORDS_FALSE | CLK_ADDRESS_NONE | CLK_FILTER_NEAREST;")
    text = body
    for name in (n for n in ("tc_half", "tc_half_d", "tc_half_bits", "tc_half_from_bits") if re.search(rf"\b{n}\(", text)): head.append(HALF_HELPERS[name])
    return "\n".join(head + [f"__kernel void {self.name}({', '.join(params)}) {{", body, "}", ""])

  def emit(self, u: UOp) -> None:
    op, dt = u.op, u.dtype
    if op is Ops.SPECIAL:
      d = int(u.arg[4:])
      fn = "get_local_id" if u.arg.startswith("lidx") else "get_group_id" if self.grouped else "get_global_id"
      self.names[u] = f"{u.arg}"
      self.line(f"{self.reg(dt)} {u.arg} = ({self.reg(dt)}){fn}({d});")
    elif op is Ops.RANGE:
      self.names[u] = f"ridx{u.arg[0]}"
      self.line(f"for ({self.reg(dt)} {self.names[u]} = 0; {self.names[u]} < {self.ref(u.src[0])}; {self.names[u]}++) {{")
      self.depth += 1
    elif op is Ops.ENDRANGE:
      self.depth -= 1
      self.line("}")
      self.names[u] = ""
    elif op is Ops.DEFINE_ACC:
      self.names[u] = f"acc{u.arg}"
      self.line(f"{self.reg(dt)} {self.names[u]} = {self.ref(u.src[0])};")
    elif op is Ops.ASSIGN:
      self.line(f"{self.ref(u.src[0])} = {self.ref(u.src[1])};")
      self.names[u] = self.names[u.src[0]]
    elif op is Ops.INDEX: self.names[u] = ""   # LOAD and STORE address through it
    elif op is Ops.DEFINE_LOCAL:
      self.names[u] = f"smem{u.arg}"
      self.line(f"__local {'uchar' if u.dtype.base == dtypes.bool else self.reg(u.dtype.base)} smem{u.arg}[{u.dtype.size}];")
    elif op is Ops.BARRIER:
      self.line("barrier(CLK_LOCAL_MEM_FENCE);")
      self.names[u] = ""
    elif op is Ops.LOAD: self.bind(u, self.load(u.src[0]))
    elif op is Ops.STORE:
      gate = next((g for g in u.src[2:] if g.dtype == dtypes.bool), None)
      self.line(self.store(u.src[0], u.src[1]) if gate is None else f"if ({self.ref(gate)}) {self.store(u.src[0], u.src[1])}")
      self.names[u] = ""
    elif op is Ops.CAST: self.bind(u, self.cast(u.src[0], dt))
    elif op is Ops.BITCAST: self.bind(u, self.bitcast(u.src[0], dt))
    elif op in GroupOp.ALU:
      expr = self.alu(op, dt, u.src)
      if dt == dtypes.float16 and not self.ren.fp16 and op not in EXACT_OPS and op not in GroupOp.Comparison: expr = f"tc_half({expr})"
      self.bind(u, expr)
    else: raise UnsupportedError(f"backend QCOM: the OpenCL renderer has no rule for {op} (kernel {self.name})")

  # ***** memory *****

  def load(self, idx: UOp) -> str:
    buf, dt = idx.src[0], idx.src[0].dtype.base.scalar
    if buf.op is Ops.DEFINE_LOCAL:   # held in the register type (bool as uchar)
      return f"({self.ref(buf)}[{self.ref(idx.src[1])}] != 0)" if dt == dtypes.bool else f"{self.ref(buf)}[{self.ref(idx.src[1])}]"
    if len(idx.src) == 3:
      coord = f"(int2)((int){self.ref(idx.src[1])}, (int){self.ref(idx.src[2])})"
      return f"read_image{'h' if dt == dtypes.float16 and self.ren.fp16 else 'f'}({self.ref(buf)}, smp, {coord}).x"
    at = f"{self.ref(buf)}[{self.ref(idx.src[1])}]"
    if dt == dtypes.bool: return f"({at} != 0)"
    if dt == dtypes.float16 and not self.ren.fp16: return f"tc_half_from_bits(((__global ushort*){self.ref(buf)})[{self.ref(idx.src[1])}])"
    return at

  def store(self, idx: UOp, val: UOp) -> str:
    buf, dt, v = idx.src[0], idx.src[0].dtype.base.scalar, self.ref(val)
    if buf.op is Ops.DEFINE_LOCAL: return f"{self.ref(buf)}[{self.ref(idx.src[1])}] = {'(uchar)' if dt == dtypes.bool else ''}{v};"
    if len(idx.src) == 3:
      coord = f"(int2)((int){self.ref(idx.src[1])}, (int){self.ref(idx.src[2])})"
      h = dt == dtypes.float16 and self.ren.fp16
      return f"write_image{'h' if h else 'f'}({self.ref(buf)}, {coord}, ({'half4' if h else 'float4'})({v}, 0, 0, 0));"
    if dt == dtypes.float16 and not self.ren.fp16: return f"((__global ushort*){self.ref(buf)})[{self.ref(idx.src[1])}] = tc_half_bits({v});"
    return f"{self.ref(buf)}[{self.ref(idx.src[1])}] = {'(uchar)' if dt == dtypes.bool else ''}{v};"

  # ***** conversions *****

  def cast(self, x: UOp, dt: DType) -> str:
    src, a = x.dtype.scalar, self.ref(x)
    if src == dt: return a
    T = self.reg(dt)
    if dt == dtypes.bool: return f"({a} != 0)"
    if src == dtypes.bool: return f"({T})({a} ? 1 : 0)"
    if dtypes.is_int(dt):
      if dtypes.is_float(src): return f"convert_{T}_sat_rtz({a})"   # saturating, NaN -> 0: the reference semantics
      return f"({T})({a})" if dtypes.is_unsigned(dt) else f"as_{T}(({UNSIGNED[dt]})({a}))"   # wraps (unsigned conversion is modular)
    if dt == dtypes.float16 and not self.ren.fp16:   # one rounding to half (ints: exact in float up to 2^24, inf past 65520)
      return f"tc_half_d({a})" if src == dtypes.float64 else f"tc_half({a if dtypes.is_float(src) else f'convert_float({a})'})"
    return f"convert_{T}({a})"   # to a float type: round to nearest even

  def bitcast(self, x: UOp, dt: DType) -> str:
    src, a = x.dtype.scalar, self.ref(x)
    if dt.itemsize != src.itemsize or dtypes.bool in (src, dt): raise UnsupportedError(f"backend QCOM cannot bitcast {src.name} to {dt.name}")
    if not self.ren.fp16 and dtypes.float16 in (src, dt):   # half values are floats here: go through their 16 bits
      bits = f"tc_half_bits({a})" if src == dtypes.float16 else f"as_ushort({a})"
      return f"tc_half_from_bits({bits})" if dt == dtypes.float16 else f"as_{CL_TYPES[dt]}({bits})"
    return f"as_{CL_TYPES[dt]}({a})"

  # ***** arithmetic *****

  def alu(self, op: Ops, dt: DType, srcs: tuple[UOp, ...]) -> str:
    s = [self.ref(x) for x in srcs]
    t = srcs[-1].dtype.scalar   # the operands' dtype (comparisons return bool)
    if op is Ops.WHERE:
      # floats by select(): pocl's compiler turns (x > 0 ? -0.0f : x) into a min that returns -0.0 for x = +0.0
      if dtypes.is_float(t): return f"select({s[2]}, {s[1]}, ({ {'float': 'int', 'double': 'long', 'half': 'short'}[self.reg(t)] }){s[0]})"
      return f"({s[0]} ? {s[1]} : {s[2]})"
    if op in GroupOp.Comparison: return f"({s[0]} {({Ops.CMPLT: '<', Ops.CMPNE: '!=', Ops.CMPEQ: '=='})[op]} {s[1]})"
    if t == dtypes.bool:
      boolean = {Ops.ADD: "|", Ops.OR: "|", Ops.MAX: "|", Ops.MUL: "&", Ops.AND: "&", Ops.XOR: "^", Ops.SUB: "^"}
      if op in boolean: return f"({s[0]} {boolean[op]} {s[1]})"
      if op is Ops.NEG: return f"(!{s[0]})"
      if op is Ops.MULACC: return f"(({s[0]} & {s[1]}) | {s[2]})"
      raise UnsupportedError(f"backend QCOM has no {op} on bool")
    if dtypes.is_float(t): return self.float_alu(op, t, s)
    return self.int_alu(op, t, s)

  def float_alu(self, op: Ops, t: DType, s: list[str]) -> str:
    infix = {Ops.ADD: "+", Ops.SUB: "-", Ops.MUL: "*", Ops.FDIV: "/"}
    if op in infix: return f"({s[0]} {infix[op]} {s[1]})"
    one = render_const(1.0, t, self.ren.fp16)
    if op is Ops.MULACC:   # the product rounded to the type before the add, as two ops would be
      prod = f"tc_half({s[0]} * {s[1]})" if t == dtypes.float16 and not self.ren.fp16 else f"({s[0]} * {s[1]})"
      return f"({prod} + {s[2]})"
    if op is Ops.NEG: return f"(-{s[0]})"
    if op is Ops.RECIP: return f"({one} / {s[0]})"
    if op is Ops.MAX: return f"(({s[0]} >= {s[1]} || isnan({s[0]})) ? {s[0]} : {s[1]})"   # NaN wins; of equal values the first
    if op is Ops.MOD: return f"fmod({s[0]}, {s[1]})"
    if op is Ops.IDIV: return f"floor({s[0]} / {s[1]})"
    fn = {Ops.SQRT: "sqrt", Ops.TRUNC: "trunc", Ops.EXP2: "exp2", Ops.LOG2: "log2", Ops.SIN: "sin"}
    if op in fn: return f"{fn[op]}({s[0]})"
    raise UnsupportedError(f"backend QCOM has no {op} on {t.name}")

  def int_alu(self, op: Ops, t: DType, s: list[str]) -> str:
    T, bits, signed = CL_TYPES[t], 8 * t.itemsize, not dtypes.is_unsigned(t)
    W = "ulong" if bits == 64 else "uint"   # wide enough that no operand promotes to a signed int that could overflow
    def wrapped(expr: str) -> str: return f"as_{T}(({UNSIGNED[t]})({expr}))" if signed else f"({T})({expr})"
    arith = {Ops.ADD: "+", Ops.SUB: "-", Ops.MUL: "*"}
    if op in arith: return wrapped(f"({W}){s[0]} {arith[op]} ({W}){s[1]}")
    if op is Ops.MULACC: return wrapped(f"({W}){s[0]} * ({W}){s[1]} + ({W}){s[2]}")
    if op is Ops.NEG: return wrapped(f"({W})0 - ({W}){s[0]}")
    if op in (Ops.XOR, Ops.OR, Ops.AND): return f"({T})({s[0]} {({Ops.XOR: '^', Ops.OR: '|', Ops.AND: '&'})[op]} {s[1]})"
    if op is Ops.MAX: return f"max({s[0]}, {s[1]})"
    n = f"({s[1]} & {bits - 1})"   # shift counts are taken mod the width
    if op is Ops.SHL: return wrapped(f"({W}){s[0]} << {n}")
    if op is Ops.SHR:   # arithmetic for signed values, written so that no right shift of a negative number is needed
      return f"({T})({s[0]} < 0 ? ~(~{s[0]} >> {n}) : {s[0]} >> {n})" if signed else f"({T})({s[0]} >> {n})"
    if op in (Ops.IDIV, Ops.MOD, Ops.RECIP):   # truncating; a zero divisor gives 0 and MIN / -1 wraps (both trap on some hardware)
      a, b = ("1", s[0]) if op is Ops.RECIP else (s[0], s[1])
      q = "%" if op is Ops.MOD else "/"
      bad = f"{b} == 0" + (f" || ({a} == {render_const(-2**(bits - 1), t)} && {b} == -1)" if signed else "")
      return f"({b} == 0 ? ({T})0 : ({T})({a} {q} ({bad} ? ({T})1 : {b})))"
    raise UnsupportedError(f"backend QCOM has no {op} on {t.name}")
