"""WGSL renderer: linear UOps -> one WebGPU compute shader with IEEE-exact NaN/inf handling and packed sub-word buffers."""
from __future__ import annotations
import math, re, struct
from tinycore.dtype import DType, PtrDType, dtypes
from tinycore.uop import UOp, Ops, GroupOp
from tinycore.renderer import Renderer
from tinycore.runtime.errors import UnsupportedError

WORKGROUP_SIZE = 64          # threads per workgroup; the flat thread id is spread over up to 3 dispatch dims
MAX_WORKGROUPS_PER_DIM = 65535  # WebGPU's guaranteed maxComputeWorkgroupsPerDimension
VARS_BINDING_NAME = "vars"

def dispatch_dims(threads: int, most: int = MAX_WORKGROUPS_PER_DIM) -> tuple[int, int, int]:
  """Workgroups as (x, y, z), each at most `most`, covering `threads`; the shader rebuilds the flat thread id from them."""
  groups = math.ceil(threads / WORKGROUP_SIZE)
  x = min(groups, most)
  y = math.ceil(groups / x) if x else 0
  z = math.ceil(y / most) if y > most else 1
  if z > most or threads >= 2**32: raise UnsupportedError(f"backend WEBGPU: {threads} threads are more than one dispatch can launch")
  return x, min(y, most), z

WGSL_TYPES = {dtypes.bool: "bool", dtypes.int32: "i32", dtypes.uint32: "u32", dtypes.float32: "f32"}
PACKED = (dtypes.bool,)  # WGSL has no byte-sized storage: these live 4 to a u32 word

# helpers WGSL compilers may not fold away: NaN tests look at the bits, never at `x != x`
HELPERS = """fn is_nan(x: f32) -> bool { return (bitcast<u32>(x) & 0x7fffffffu) > 0x7f800000u; }
fn nan_f32() -> f32 { return bitcast<f32>(0x7fc00000u); }
fn ieee_max(a: f32, b: f32) -> f32 { return select(select(max(a, b), b, is_nan(b)), a, is_nan(a)); }
fn ieee_sqrt(x: f32) -> f32 { return select(sqrt(x), nan_f32(), x < 0.0f || is_nan(x)); }
fn ieee_log2(x: f32) -> f32 {
  if (is_nan(x) || x < 0.0f) { return nan_f32(); }
  if (x == 0.0f) { return bitcast<f32>(0xff800000u); }
  if (x == bitcast<f32>(0x7f800000u)) { return x; }
  return log2(x);
}
fn ieee_exp2(x: f32) -> f32 {
  if (is_nan(x)) { return x; }
  if (x >= 128.0f) { return bitcast<f32>(0x7f800000u); }
  if (x < -150.0f) { return 0.0f; }
  return exp2(x);
}
fn ieee_sin(x: f32) -> f32 {
  if (is_nan(x) || abs(x) == bitcast<f32>(0x7f800000u)) { return nan_f32(); }
  // Cody-Waite reduction by pi/2 in three parts: WGSL only promises accuracy of sin() on [-pi, pi]
  let k = round(x * 0.636619772f);
  var r = fma(-k, 1.5703125f, x);
  r = fma(-k, 4.83751297e-04f, r);
  r = fma(-k, 7.54978995e-08f, r);
  let q = i32(k) & 3;
  if (q == 0) { return sin(r); }
  if (q == 1) { return cos(r); }
  if (q == 2) { return -sin(r); }
  return -cos(r);
}
fn f32_to_i32(x: f32) -> i32 {
  if (is_nan(x)) { return 0; }
  if (x >= 2147483648.0f) { return 2147483647; }
  if (x <= -2147483648.0f) { return bitcast<i32>(0x80000000u); }
  return i32(x);
}
fn f32_to_u32(x: f32) -> u32 {
  if (is_nan(x) || x <= 0.0f) { return 0u; }
  if (x >= 4294967296.0f) { return 0xffffffffu; }
  return u32(x);
}
fn idiv_i32(a: i32, b: i32) -> i32 { return select(a / select(b, 1, b == 0), 0, b == 0); }
fn imod_i32(a: i32, b: i32) -> i32 { return select(a % select(b, 1, b == 0), 0, b == 0); }
fn idiv_u32(a: u32, b: u32) -> u32 { return select(a / select(b, 1u, b == 0u), 0u, b == 0u); }
fn imod_u32(a: u32, b: u32) -> u32 { return select(a % select(b, 1u, b == 0u), 0u, b == 0u); }
"""
HELPER_FNS = {m.group(1): m.group(0) for m in re.finditer(r"^fn (\w+)\(.*?^(?=fn |\Z)", HELPERS, re.S | re.M)}

def helpers_for(body: str) -> list[str]:
  """The helper functions body calls, and the ones those call: kernels stay short to read."""
  used, text = [], body
  while (new := [n for n in HELPER_FNS if n not in used and re.search(rf"\b{n}\(", text)]):
    used += new
    text = "\n".join(HELPER_FNS[n] for n in new)
  return [HELPER_FNS[n].rstrip() for n in HELPER_FNS if n in used]

def wgsl_type(dt: DType) -> str:
  if dt.scalar not in WGSL_TYPES: raise UnsupportedError(f"backend WEBGPU does not support dtype {dt.scalar.name} in WGSL")
  return WGSL_TYPES[dt.scalar]

def render_const(x, dt: DType) -> str:
  if dt == dtypes.bool: return "true" if x else "false"
  if dt == dtypes.float32:
    bits = struct.unpack("<I", struct.pack("<f", float(x)))[0]
    if not math.isfinite(float(x)): return f"bitcast<f32>({bits:#x}u)"
    f = struct.unpack("<f", struct.pack("<I", bits))[0]
    if f == 0 and math.copysign(1, f) < 0: return "bitcast<f32>(0x80000000u)"
    text = f"{int(f)}.0f" if f == int(f) and abs(f) < 2**24 else f"{f.hex()}f"   # hex floats are exact
    return f"({text})" if f < 0 else text
  if dt == dtypes.uint32: return f"{int(x) & 0xffffffff}u"
  if dt == dtypes.int32: return f"{int(x)}i" if int(x) >= 0 else f"bitcast<i32>({int(x) & 0xffffffff}u)" if int(x) == -2**31 else f"({int(x)}i)"
  raise UnsupportedError(f"backend WEBGPU cannot render a constant of dtype {dt.name}")

class WGSLRenderer(Renderer):
  """The WebGPU target: 32-bit types plus bool, flat thread ids decomposed in the shader, 32-bit addressing."""
  device = "WEBGPU"
  supported_dtypes = frozenset({dtypes.bool, dtypes.int32, dtypes.uint32, dtypes.float32})
  global_dims = 3
  global_max = (2**31 - 1,) * 3       # the shader recovers each id from one flat id, so only the total is bounded
  max_buffers = 8                     # WebGPU's guaranteed maxStorageBuffersPerShaderStage (browsers default to it)
  index_bits = 32
  upcast_max = 4

  def render(self, name: str, uops: list[UOp]) -> str:
    return _Kernel(name, uops, self.max_buffers).source()

class _Kernel:
  """The state of rendering one kernel: names given to values, the body being written, the indentation depth."""
  def __init__(self, name: str, uops: list[UOp], max_buffers: int):
    self.name, self.uops = name, uops
    self.params = sorted({u.arg: u for u in uops if u.op is Ops.DEFINE_GLOBAL}.items())
    if len(self.params) > max_buffers:
      raise UnsupportedError(f"backend WEBGPU: kernel {name} needs {len(self.params)} storage buffers, but the limit is {max_buffers} "
                             "(maxStorageBuffersPerShaderStage)")
    self.stored = {u.src[0].src[0].arg for u in uops if u.op is Ops.STORE}
    self.vars = [u for u in uops if u.op is Ops.DEFINE_VAR]
    self.params_by_arg = dict(self.params)
    self.names: dict[UOp, str] = {}
    self.lines: list[str] = []
    self.depth = 1

  def line(self, s: str) -> None: self.lines.append("  " * self.depth + s)
  def is_atomic(self, p: int) -> bool: return self.params_by_arg[p].dtype.base.scalar in PACKED and p in self.stored

  def declarations(self) -> list[str]:
    out = []
    for p, u in self.params:
      base = u.dtype.base.scalar
      elem = ("atomic<u32>" if p in self.stored else "u32") if base in PACKED else wgsl_type(base)
      out.append(f"@group(0) @binding({p}) var<storage, read_write> data{p}: array<{elem}>;")
    if self.vars:
      nvec = (len(self.vars) + 3) // 4
      out.append(f"@group(0) @binding({self.vars_binding()}) var<uniform> {VARS_BINDING_NAME}: array<vec4<i32>, {nvec}>;")
    return out

  def vars_binding(self) -> int: return max((p for p, _ in self.params), default=-1) + 1

  def ref(self, u: UOp) -> str:
    """The expression for u's value; CONSTs are written inline, everything else was bound to a name when emitted."""
    if u.op is Ops.CONST: return render_const(u.arg, u.dtype)
    if u not in self.names: self.emit(u)
    return self.names[u]

  def bind(self, u: UOp, expr: str) -> None:
    n = f"v{len(self.names)}"
    self.line(f"let {n}: {wgsl_type(u.dtype)} = {expr};")
    self.names[u] = n

  def emit_thread_ids(self) -> None:
    """Every SPECIAL comes from one flat thread id; threads past the launch size stop here."""
    specials = sorted((u for u in self.uops if u.op is Ops.SPECIAL), key=lambda s: s.arg)
    sizes = [f"u32({self.ref(s.src[0])})" for s in specials]
    self.line(f"let flat = (wid.z * nwg.y + wid.y) * nwg.x * {WORKGROUP_SIZE}u + wid.x * {WORKGROUP_SIZE}u + lid.x;")
    self.line(f"if (flat >= {' * '.join(sizes) or '1u'}) {{ return; }}")
    stride = ""
    for i, (s, size) in enumerate(zip(specials, sizes)):
      q = f"flat / ({stride})" if stride else "flat"
      self.names[s] = f"gidx{i}"
      self.line(f"let gidx{i}: i32 = i32({q if i == len(specials) - 1 else f'({q}) % {size}'});")
      stride = f"{stride} * {size}" if stride else size

  def source(self) -> str:
    decls = self.declarations()
    for i, v in enumerate(self.vars):
      n = "var_" + re.sub(r"\W", "_", v.arg[0])
      self.line(f"let {n}: {wgsl_type(v.dtype)} = {VARS_BINDING_NAME}[{i // 4}][{i % 4}];")
      self.names[v] = n
    self.emit_thread_ids()
    for u in self.uops:
      if u not in self.names and u.op is not Ops.CONST: self.emit(u)
    head = [f"// {self.name}", "// tinycore WEBGPU kernel: workgroup_size " + str(WORKGROUP_SIZE)]
    main = [f"@compute @workgroup_size({WORKGROUP_SIZE})",
            f"fn {self.name}(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, "
            "@builtin(local_invocation_id) lid: vec3<u32>) {"]
    return "\n".join(head + decls + helpers_for("\n".join(self.lines)) + main + self.lines + ["}", ""])

  def emit(self, u: UOp) -> None:
    op = u.op
    if op in (Ops.DEFINE_GLOBAL, Ops.SPECIAL, Ops.DEFINE_VAR): return
    if op is Ops.INDEX: self.names[u] = ""; return   # addresses are used by LOAD/STORE directly
    if op is Ops.RANGE:
      n = f"ridx{u.arg[0]}"
      self.line(f"for (var {n}: {wgsl_type(u.dtype)} = 0; {n} < {self.ref(u.src[0])}; {n}++) {{")
      self.names[u] = n
      self.depth += 1
      return
    if op is Ops.ENDRANGE:
      self.depth -= 1
      self.line("}")
      self.names[u] = ""
      return
    if op is Ops.DEFINE_ACC:
      n = f"acc{u.arg}"
      self.line(f"var {n}: {wgsl_type(u.dtype)} = {self.ref(u.src[0])};")
      self.names[u] = n
      return
    if op is Ops.ASSIGN:
      self.line(f"{self.ref(u.src[0])} = {self.ref(u.src[1])};")
      self.names[u] = self.names[u.src[0]]
      return
    if op is Ops.LOAD: return self.bind(u, self.load(u.src[0]))
    if op is Ops.STORE:
      self.store(u.src[0], u.src[1])
      self.names[u] = ""
      return
    if op is Ops.CAST: return self.bind(u, self.cast(u.src[0], u.dtype))
    if op is Ops.BITCAST:
      if u.dtype.itemsize != 4 or u.src[0].dtype.itemsize != 4: raise UnsupportedError(f"backend WEBGPU cannot bitcast {u.src[0].dtype.name} to {u.dtype.name}")
      return self.bind(u, f"bitcast<{wgsl_type(u.dtype)}>({self.ref(u.src[0])})")
    if op in GroupOp.ALU: return self.bind(u, self.alu(op, u.dtype, u.src))
    raise UnsupportedError(f"backend WEBGPU cannot render {op} in kernel {self.name}")

  # ***** memory *****

  def address(self, idx: UOp) -> tuple[int, DType, str]:
    buf, i = idx.src[0], idx.src[1]
    return buf.arg, buf.dtype.base.scalar, self.ref(i)

  def load(self, idx: UOp) -> str:
    p, dt, i = self.address(idx)
    if dt not in PACKED: return f"data{p}[{i}]"
    word = f"atomicLoad(&data{p}[{i} >> 2u])" if self.is_atomic(p) else f"data{p}[{i} >> 2u]"
    return f"((({word} >> (u32({i} & 3) * 8u)) & 0xffu) != 0u)"

  def store(self, idx: UOp, val: UOp) -> None:
    p, dt, i = self.address(idx)
    if dt not in PACKED: return self.line(f"data{p}[{i}] = {self.ref(val)};")
    # neighbouring threads own the other bytes of this word: clear and set ours atomically
    shift = f"(u32({i} & 3) * 8u)"
    self.line(f"atomicAnd(&data{p}[{i} >> 2u], ~(0xffu << {shift}));")
    self.line(f"atomicOr(&data{p}[{i} >> 2u], select(0u, 1u, {self.ref(val)}) << {shift});")

  # ***** arithmetic *****

  def cast(self, x: UOp, dt: DType) -> str:
    src, a = x.dtype.scalar, self.ref(x)
    wt = wgsl_type(dt)
    if src == dt.scalar: return a
    if dt == dtypes.bool: return f"((bitcast<u32>({a}) & 0x7fffffffu) != 0u)" if src == dtypes.float32 else f"({a} != {render_const(0, src)})"
    if src == dtypes.bool: return f"select({render_const(0, dt)}, {render_const(1, dt)}, {a})"
    if src == dtypes.float32 and dt == dtypes.int32: return f"f32_to_i32({a})"
    if src == dtypes.float32 and dt == dtypes.uint32: return f"f32_to_u32({a})"
    return f"{wt}({a})"   # int<->int keeps the bits (wraps); int->float rounds to nearest

  def alu(self, op: Ops, dt: DType, srcs: tuple[UOp, ...]) -> str:
    s = [self.ref(x) for x in srcs]
    t = srcs[-1].dtype.scalar   # operand dtype (comparisons return bool from non-bool operands)
    isf, isb = t == dtypes.float32, t == dtypes.bool
    if op is Ops.WHERE: return f"select({s[2]}, {s[1]}, {s[0]})"
    if op is Ops.MULACC: return f"({s[0]} * {s[1]} + {s[2]})"
    if op in GroupOp.Comparison:
      if isb and op is Ops.CMPLT: return f"(!{s[0]} && {s[1]})"
      sym = {Ops.CMPLT: "<", Ops.CMPNE: "!=", Ops.CMPEQ: "=="}[op]
      if not isf: return f"({s[0]} {sym} {s[1]})"
      ordered = f"!is_nan({s[0]}) && !is_nan({s[1]})"
      if op is Ops.CMPNE: return f"(!({ordered}) || {s[0]} != {s[1]})"
      return f"({ordered} && {s[0]} {sym} {s[1]})"
    if isb:
      boolean = {Ops.ADD: "||", Ops.OR: "||", Ops.MAX: "||", Ops.MUL: "&&", Ops.AND: "&&", Ops.XOR: "!="}
      if op in boolean: return f"({s[0]} {boolean[op]} {s[1]})"
      if op is Ops.NEG: return f"(!{s[0]})"
      raise UnsupportedError(f"backend WEBGPU has no {op} on bool")
    if op in (Ops.ADD, Ops.SUB, Ops.MUL, Ops.XOR, Ops.OR, Ops.AND) or (op is Ops.FDIV and isf):
      sym = {Ops.ADD: "+", Ops.SUB: "-", Ops.MUL: "*", Ops.XOR: "^", Ops.OR: "|", Ops.AND: "&", Ops.FDIV: "/"}[op]
      return f"({s[0]} {sym} {s[1]})"
    if op in (Ops.SHL, Ops.SHR):
      amount = f"{int(srcs[1].arg) & 31}u" if srcs[1].op is Ops.CONST else f"u32({s[1]})"   # runtime shifts are mod 32 in WGSL
      return f"({s[0]} {'<<' if op is Ops.SHL else '>>'} {amount})"
    if op in (Ops.IDIV, Ops.MOD) and not isf: return f"{'idiv' if op is Ops.IDIV else 'imod'}_{wgsl_type(t)}({s[0]}, {s[1]})"
    if op is Ops.MOD: return f"({s[0]} % {s[1]})"
    if op is Ops.MAX: return f"ieee_max({s[0]}, {s[1]})" if isf else f"max({s[0]}, {s[1]})"
    if op is Ops.NEG: return f"(0u - {s[0]})" if t == dtypes.uint32 else f"(-{s[0]})"
    if isf:
      unary = {Ops.EXP2: "ieee_exp2", Ops.LOG2: "ieee_log2", Ops.SIN: "ieee_sin", Ops.SQRT: "ieee_sqrt", Ops.TRUNC: "trunc"}
      if op in unary: return f"{unary[op]}({s[0]})"
      if op is Ops.RECIP: return f"(1.0f / {s[0]})"
    if op is Ops.TRUNC: return s[0]
    raise UnsupportedError(f"backend WEBGPU has no {op} on {t.name}")
