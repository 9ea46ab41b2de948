"""QCOM's renderer: linear UOps -> OpenCL C for Adreno (half, float64 only with cl_khr_fp64, 2-D images), with the core's semantics."""
from __future__ import annotations
import math, os, re
from dataclasses import dataclass
from tinycore.dtype import DType, PtrDType, dtypes, INTS
from tinycore.uop import UOp, Ops
from tinycore.renderer import on
from tinycore.renderer.cstyle import CStyleRenderer, CStyleKernel
from tinycore.rewrite import PatternMatcher, UPat, graph_substitute
from tinycore.uop import split_terms

# OpenCL C's names for each dtype, and the unsigned type of the same width (wrapping integer math is done unsigned:
# signed overflow is undefined in OpenCL C as in C). bool lives in memory as uchar: bool pointers cannot be kernel arguments.
CL_TYPES = {dtypes.bool: "bool", dtypes.int8: "char", dtypes.uint8: "uchar", dtypes.int16: "short", dtypes.uint16: "ushort",
            dtypes.int32: "int", dtypes.uint32: "uint", dtypes.int64: "long", dtypes.uint64: "ulong", dtypes.float16: "half",
            dtypes.float32: "float", dtypes.float64: "double"}
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

# ***** the renderer *****

def as_int(t: str, expr: str) -> str:
  """expr (computed in the unsigned type of t's width, where overflow wraps) as t: signed overflow is undefined in OpenCL C."""
  return f"({t})({expr})" if t[0] == "u" else f"as_{t}((u{t})({expr}))"

def int_math(ctx: CStyleKernel, x: UOp) -> str:
  """+ - * (and NEG, MULACC, SHL) in an unsigned type wide enough that no operand promotes to a signed int that could overflow."""
  t, a = ctx.type(x.dtype), [f"({'ulong' if x.dtype.itemsize == 8 else 'uint'}){v}" for v in ctx.args(x)]
  if x.op is Ops.SHL: return as_int(t, f"{a[0]} << ({ctx[x.src[1]]} & {8 * x.dtype.itemsize - 1})")
  if x.op is Ops.NEG: return as_int(t, f"0 - {a[0]}")
  return as_int(t, f"{a[0]} * {a[1]} + {a[2]}" if x.op is Ops.MULACC else f"{a[0]} {ctx.ren.infix[x.op]} {a[1]}")

def image_at(ctx: CStyleKernel, i: UOp) -> str: return f"(int2)((int){ctx[i.src[1]]}, (int){ctx[i.src[2]]})"
def image_type(dt: DType) -> str: return "h" if dt == dtypes.float16 else "f"   # read_imageh/imagef (half images only with fp16)

SELECT_MASK = {dtypes.float16: "short", dtypes.float32: "int", dtypes.float64: "long"}   # select()'s condition type per float

class OpenCLRenderer(CStyleRenderer):
  """OpenCL C for Adreno. Defaults describe an Adreno GPU (native half through cl_khr_fp16, no float64, images with the
  OpenCL 1.2 minimum limits); `for_device` reads what an opened device reports. Rendering needs no device."""
  device, language = "QCOM", "OpenCL C"
  global_dims = 3
  global_max = (2**31 - 1,) * 3
  has_local = True                 # SPECIAL lidxN are get_local_id(N): global_size then counts workgroups
  has_shared = True                # DEFINE_LOCAL: __local arrays; BARRIER: barrier(CLK_LOCAL_MEM_FENCE)
  shared_max = 32 << 10            # OpenCL 1.2's guaranteed minimum CL_DEVICE_LOCAL_MEM_SIZE (Adreno: 32 KiB)
  local_max = (1024, 1024, 64)
  max_threads_per_group = 1024
  index_bits = 64
  upcast_max = 4
  types = CL_TYPES
  float_suffix = {}                # OpenCL's builtins are overloaded
  buffer = "__global {type}* {name}"
  memory_types = {dtypes.bool: "uchar"}   # bool pointers cannot be kernel arguments
  vector_type = "{type}{n}"
  shared, barrier = "__local {type} {name}[{size}];", "barrier(CLK_LOCAL_MEM_FENCE);"

  def __init__(self, fp16: bool = True, fp64: bool = False, images: bool | None = None, image_max: tuple[int, int] = (8192, 8192),
               max_read_images: int = 128, max_write_images: int = 8):
    """fp16: native half arithmetic (cl_khr_fp16), else the core's (float math, half held as its bits); fp64: double
    (cl_khr_fp64). The image
    limits default to OpenCL 1.2's guaranteed minimums; `for_device` reads them from a device."""
    self.fp16, self.fp64 = fp16, fp64
    # QCOM_IMAGE=1: float tensors a kernel only reads or only writes go through image2d_t (the texture cache on Adreno)
    self.images = bool(int(os.environ.get("QCOM_IMAGE", "0"))) if images is None else images
    self.image_max, self.max_read_images, self.max_write_images = image_max, max_read_images, max_write_images
    self.extra_matcher = PatternMatcher([(UPat(Ops.SINK, name="sink"), lambda sink: to_images(self, sink))])
    self.supported_dtypes = frozenset(d for d in CL_TYPES if d != dtypes.float64 or fp64)
    if not fp16: self.alu_dtypes = self.supported_dtypes - {dtypes.float16}
    self.mulacc_dtypes = frozenset({dtypes.float32, dtypes.float64} & self.supported_dtypes)   # fma(), correctly rounded

  @property
  def memory_vector(self) -> int:
    """A thread's consecutive elements (codegen/widen.py) as one vloadn/vstoren of up to 16 bytes; not with images,
    whose reads and writes are one element each (a kernel's float buffers are images then)."""
    return 0 if self.images else 16

  @classmethod
  def for_device(cls, info) -> OpenCLRenderer:
    """The target as an OpenCL device describes itself (half and double by extension, image limits); None: an Adreno GPU."""
    if info is None: return cls()
    return cls("cl_khr_fp16" in info.extensions, "cl_khr_fp64" in info.extensions, None if info.has_images else False,
               info.image_max, info.max_read_images, info.max_write_images)

  def render_kernel(self, k: CStyleKernel) -> str:
    images = {u.src[0].arg: u.arg for u in k.uops if u.op is Ops.INDEX and len(u.src) == 3}
    writes = sorted({u.src[0].src[0].arg for u in k.uops if u.op is Ops.STORE and u.src[0].src[0].op is Ops.DEFINE_GLOBAL})
    var_types = [k.type(v.dtype) for v in k.uops if v.op is Ops.DEFINE_VAR]
    head = [f"{KERNEL_HEADER} {k.name}", " ".join(["// writes", *map(str, writes)]), " ".join(["// vars", *var_types])]
    head += [f"// image {i.param} {i.dtype.name} {i.width}x{i.height} {i.access}" for i in sorted(images.values(), key=lambda i: i.param)]
    head.append("#pragma OPENCL FP_CONTRACT OFF")   # a*b+c stays two roundings, as defined (fused only as MULACC, fma())
    used = {(u.dtype.base if isinstance(u.dtype, PtrDType) else u.dtype).scalar for u in k.uops}
    if dtypes.float16 in used: head.append("#pragma OPENCL EXTENSION cl_khr_fp16 : enable")
    if dtypes.float64 in used: head.append("#pragma OPENCL EXTENSION cl_khr_fp64 : enable")
    if images: head.append("__constant sampler_t smp = CLK_NORMALIZED_COORDS_FALSE | CLK_ADDRESS_NONE | CLK_FILTER_NEAREST;")
    return "\n".join(head + list(k.helpers.values()) + [f"__kernel void {k.name}({', '.join(k.params)}) {{", *k.lines, "}", ""])
  def render_const(self, v, dt: DType) -> str:
    if dt == dtypes.bool: return "true" if v else "false"
    if dtypes.is_int(dt):
      suffix = {dtypes.uint32: "u", dtypes.int64: "L", dtypes.uint64: "UL"}.get(dt, "")
      if v == dtypes.min(dt) and not dtypes.is_unsigned(dt): return f"(({CL_TYPES[dt]})({v + 1}{'L' if dt.itemsize == 8 else ''} - 1))"
      return f"(({CL_TYPES[dt]}){v}{suffix})" if dt.itemsize < 4 else f"{v}{suffix}" if v >= 0 else f"({v}{suffix})"
    text = "NAN" if math.isnan(v) else ("INFINITY" if v > 0 else "(-INFINITY)") if math.isinf(v) else float(v).hex() + ("" if dt == dtypes.float64 else "f")
    if dt == dtypes.float64 and not math.isfinite(v): return f"((double){text})"
    if dt == dtypes.float16: return f"((half){text})"
    return f"({text})" if text.startswith("-") else text
  def render_special(self, ctx: CStyleKernel, x: UOp) -> str:
    grouped = any(u.op is Ops.SPECIAL and u.arg.startswith("lidx") for u in ctx.uops)
    fn = "get_local_id" if x.arg.startswith("lidx") else "get_group_id" if grouped else "get_global_id"
    return ctx.declare(self.let, x.arg, x.dtype, f"({ctx.type(x.dtype)}){fn}({x.arg[4:]})")
  def render_cast(self, ctx: CStyleKernel, x: UOp) -> str:
    a, src, dst, t = ctx[x.src[0]], x.src[0].dtype, x.dtype, ctx.type(x.dtype)
    if dst == dtypes.bool: return f"({a} != 0)"
    if src == dtypes.bool: return f"({t})({a} ? 1 : 0)"
    if dtypes.is_int(dst): return f"convert_{t}_sat_rtz({a})" if dtypes.is_float(src) else as_int(t, a)   # saturating, NaN -> 0
    return f"convert_{t}({a})"   # to a float type: round to nearest even
  def render_bitcast(self, ctx: CStyleKernel, x: UOp) -> str: return f"as_{CL_TYPES[x.dtype]}({ctx[x.src[0]]})"

  rules = PatternMatcher([
    (UPat(Ops.DEFINE_GLOBAL, name="x"), lambda ctx, x: ctx.param(f"{i.access}_only image2d_t data{x.arg}", f"data{x.arg}")
     if (i := next((u.arg for u in ctx.uops if u.op is Ops.INDEX and len(u.src) == 3 and u.src[0] is x), None)) else None),
    (UPat(Ops.INDEX, src=(UPat(), UPat(), UPat())), lambda ctx: ""),   # an image's coordinates: LOAD and STORE write them
    (UPat(Ops.LOAD, src=(UPat(Ops.INDEX, src=(UPat(), UPat(), UPat()), name="i"),), allow_any_len=True, name="x"),
     lambda ctx, x, i: f"read_image{image_type(x.dtype)}({ctx[i.src[0]]}, smp, {image_at(ctx, i)}).x"),
    (UPat(Ops.STORE, src=(UPat(Ops.INDEX, src=(UPat(), UPat(), UPat()), name="i"), UPat.var("v")), allow_any_len=True, name="x"),
     lambda ctx, x, i, v: ctx.line(f"write_image{image_type(v.dtype)}({ctx[i.src[0]]}, {image_at(ctx, i)}, "
                                   f"({'half4' if image_type(v.dtype) == 'h' else 'float4'})({ctx[v]}, 0, 0, 0));")),
    # vectors: an INDEX of a vector pointer is the address of its first element, read and written by vloadn/vstoren (any
    # element alignment), its lanes .s0 .. .sf
    (UPat(Ops.INDEX, name="x"), lambda ctx, x: "({} + {})".format(*ctx.args(x)) if x.dtype.base.count > 1 else None),
    (UPat(Ops.LOAD, name="x"), lambda ctx, x: f"vload{x.dtype.count}(0, {ctx[x.src[0]]})" if x.dtype.count > 1 else None),
    (UPat(Ops.STORE, src=(UPat.var("i"), UPat.var("v")), allow_any_len=True, name="x"),
     lambda ctx, x, i, v: ctx.line(f"vstore{v.dtype.count}({ctx[v]}, 0, {ctx[i]});") if v.dtype.count > 1 else None),
    (UPat(Ops.GEP, name="x"), lambda ctx, x: f"{ctx[x.src[0]]}.s{x.arg:x}"),
    (UPat(Ops.VECTORIZE, name="x"), lambda ctx, x: f"(({ctx.type(x.dtype)})({', '.join(ctx.args(x))}))"),
    (UPat(Ops.LOAD, dtypes.bool, name="x"), lambda ctx, x: f"({ctx[x.src[0]]} != 0)"),   # bool lives in memory as uchar
    (UPat(Ops.STORE, src=(UPat.var("i"), UPat.var("v", dtypes.bool)), allow_any_len=True, name="x"), lambda ctx, x, i, v: ctx.line(f"{ctx[i]} = (uchar){ctx[v]};")),
    # floats by select(): pocl's compiler turns (x > 0 ? -0.0f : x) into a min that returns -0.0 for x = +0.0
    (UPat(Ops.WHERE, tuple(SELECT_MASK), name="x"), lambda ctx, x: "select({2}, {1}, ({t}){0})".format(*ctx.args(x), t=SELECT_MASK[x.dtype])),
    (on(Ops.MAX, INTS), lambda ctx, x: "max({}, {})".format(*ctx.args(x))),
    (on((Ops.ADD, Ops.SUB, Ops.MUL, Ops.NEG, Ops.MULACC, Ops.SHL), INTS), int_math),
    # arithmetic for signed values, written so that no right shift of a negative number is needed
    (on(Ops.SHR, INTS), lambda ctx, x: "({t})({0} < 0 ? ~(~{0} >> ({1} & {w})) : {0} >> ({1} & {w}))".format(*ctx.args(x), t=ctx.type(x.dtype),
                                                                                                          w=8 * x.dtype.itemsize - 1)
     if not dtypes.is_unsigned(x.dtype) else None),
  ]) + CStyleRenderer.rules
