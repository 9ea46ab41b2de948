"""WGSL renderer: linear UOps -> one WebGPU compute shader with IEEE-exact NaN/inf handling (on the C-style base)."""
from __future__ import annotations
import math, re, struct
from tinycore.dtype import DType, dtypes
from tinycore.uop import UOp, Ops, GroupOp
from tinycore.rewrite import PatternMatcher, UPat
from tinycore.renderer import on
from tinycore.renderer.cstyle import CStyleRenderer, CStyleKernel
from tinycore.codegen.transcendental import sin_rules, fmod_rules
from tinycore.runtime.errors import UnsupportedError

WORKGROUP_SIZE = 64          # threads per workgroup; the flat thread id is spread over up to 3 dispatch dims
MAX_WORKGROUPS_PER_DIM = 65535  # WebGPU's guaranteed maxComputeWorkgroupsPerDimension
VARS_BINDING_NAME = "vars"

def dispatch_dims(items: int, most: int = MAX_WORKGROUPS_PER_DIM, per_group: int = WORKGROUP_SIZE) -> tuple[int, int, int]:
  """Workgroups as (x, y, z), each at most `most`, covering `items` (threads, per_group to a workgroup; or workgroups, with
  per_group=1); the shader rebuilds the flat id from them."""
  groups = math.ceil(items / per_group)
  x = min(groups, most)
  y = math.ceil(groups / x) if x else 0
  z = math.ceil(y / most) if y > most else 1
  if z > most or items >= 2**32:
    raise UnsupportedError(f"backend WEBGPU: {items} {'threads' if per_group > 1 else 'workgroups'} are more than one dispatch can launch")
  return x, min(y, most), z

GROUPS_GRID = "// grid: workgroups"   # marks a kernel with local ids: global_size counts workgroups, not threads

def launch_shape(src: str) -> tuple[tuple[int, int, int], bool]:
  """(workgroup size, whether global_size counts workgroups) of a kernel this renderer wrote."""
  m = re.search(r"@workgroup_size\((\d+)(?:,\s*(\d+))?(?:,\s*(\d+))?\)", src)
  wg = tuple(int(g) if g else 1 for g in m.groups()) if m else (WORKGROUP_SIZE, 1, 1)
  return (wg[0], wg[1], wg[2]), GROUPS_GRID in src

def uniform_binding(src: str) -> int | None:
  """The binding of the uniform buffer holding the integer variables of a kernel this renderer wrote (None: it has none)."""
  return int(m.group(1)) if (m := re.search(r"@binding\((\d+)\) var<uniform>", src)) else None

# Mesa's software drivers (lavapipe, llvmpipe) end every loop of a shader invocation once its loops have made 65535 passes
# between them: a longer reduction would silently stop early. The kernel states its worst case; the driver compares it
# with what its adapter allows (it probes that at open)
LOOP_PASSES = "// loop passes per thread:"

def loop_passes(src: str) -> int:
  """The most loop passes one thread of a kernel this renderer wrote makes: each entry into a loop costs its trips plus
  the pass that exits."""
  return int(m.group(1)) if (m := re.search(rf"^{LOOP_PASSES} (\d+)$", src, re.M)) else 0

def dispatch_for(src: str, global_size, most: int = MAX_WORKGROUPS_PER_DIM) -> tuple[int, int, int]:
  """The dispatchWorkgroups() arguments launching `src` over global_size (the driver and the browser export share this)."""
  wg, groups = launch_shape(src)
  return dispatch_dims(math.prod(global_size), most, 1 if groups else math.prod(wg))

WGSL_TYPES = {dtypes.bool: "bool", dtypes.int32: "i32", dtypes.uint32: "u32", dtypes.float32: "f32",
              dtypes.int8: "i32", dtypes.uint8: "u32", dtypes.int16: "i32", dtypes.uint16: "u32"}
# 8- and 16-bit integers live in i32/u32 registers, always exactly a value of their type (the core computes them in 32 bits)
SMALL_INTS = {dtypes.int8: 8, dtypes.uint8: 8, dtypes.int16: 16, dtypes.uint16: 16}

def signed(dt: DType) -> bool: return dtypes.is_int(dt) and not dtypes.is_unsigned(dt)

def wrap(expr: str, dt: DType) -> str:
  """expr (an i32/u32 value) wrapped to dt's width: two's complement for the signed ones. Masks, never shifts left
  (a const-expression that overflows a shift is a shader-creation error)."""
  if dt not in SMALL_INTS: return expr
  mask, top = (1 << SMALL_INTS[dt]) - 1, 1 << (SMALL_INTS[dt] - 1)
  return f"(((({expr}) & {mask:#x}i) ^ {top:#x}i) - {top:#x}i)" if signed(dt) else f"(({expr}) & {mask:#x}u)"

# helpers WGSL compilers may not fold away: NaN tests look at the bits, never at `x != x`. Infinities and NaNs come from
# f32_bits(): a user function call is not a const-expression, and Tint (Chromium) refuses a const-expression that is not
# finite ("value nan cannot be represented as 'f32'"), where naga (wgpu-native) accepted bitcast<f32>(0x7fc00000u).
HELPERS = """fn f32_bits(u: u32) -> f32 { return bitcast<f32>(u); }
fn pin(x: f32) -> f32 {
  // x exactly as computed: compilers reassociate and contract float math they can see through ((a + b) - a became b,
  // a * b + c an fma), which rounds differently from the definition. An xor with a value they cannot know is 0 hides x.
  return bitcast<f32>(bitcast<u32>(x) ^ runtime_zero);
}
fn is_nan(x: f32) -> bool { return (bitcast<u32>(x) & 0x7fffffffu) > 0x7f800000u; }
fn nan_f32() -> f32 { return f32_bits(0x7fc00000u); }
fn ieee_max(a: f32, b: f32) -> f32 {
  // NaN in either gives NaN; of equal values (0 and -0) the first, as the reference semantics (numpy) and CPU do
  return select(b, a, is_nan(a) || (!is_nan(b) && a >= b));
}
fn ieee_sqrt(x: f32) -> f32 { return select(sqrt(x), nan_f32(), x < 0.0f || is_nan(x)); }
fn ieee_log2(x: f32) -> f32 {
  if (is_nan(x) || x < 0.0f) { return nan_f32(); }
  if (x == 0.0f) { return f32_bits(0xff800000u); }
  if (bitcast<u32>(x) == 0x7f800000u) { return x; }
  // Mesa reads a subnormal's exponent field alone (log2 gave -127 for all of them): scale it into the normal range first
  if (x < 0x1p-126f) { return pin(log2(pin(x * 8388608.0f))) - 23.0f; }
  return log2(x);
}
fn ieee_exp2(x: f32) -> f32 {
  if (is_nan(x)) { return x; }
  if (x >= 128.0f) { return f32_bits(0x7f800000u); }
  if (x < -150.0f) { return 0.0f; }
  // a subnormal result (Mesa flushed them to 0): 2^(x + 24) is normal, and x + 24 is exact down there
  if (x < -126.0f) { return pin(exp2(pin(x + 24.0f))) * 0x1p-24f; }
  return exp2(x);
}
fn ieee_div(a: f32, b: f32) -> f32 {
  // WGSL leaves x / 0 indeterminate and compilers fold divisions by constants without IEEE rules (lavapipe turned
  // 0.0 / 0.0 into garbage): the special cases are decided on the bits, the hardware divides finite nonzero values only
  let ua = bitcast<u32>(a) & 0x7fffffffu;
  let ub = bitcast<u32>(b) & 0x7fffffffu;
  let sign = (bitcast<u32>(a) ^ bitcast<u32>(b)) & 0x80000000u;
  let plain = ua != 0u && ub != 0u && ua < 0x7f800000u && ub < 0x7f800000u;
  let q = select(1.0f, a, plain) / select(1.0f, b, plain);
  let nan = ua > 0x7f800000u || ub > 0x7f800000u || (ua == 0u && ub == 0u) || (ua == 0x7f800000u && ub == 0x7f800000u);
  let inf = ub == 0u || ua == 0x7f800000u;
  let zero = ua == 0u || ub == 0x7f800000u;
  return select(select(select(q, bitcast<f32>(sign), zero), f32_bits(sign | 0x7f800000u), inf), nan_f32(), nan);
}
fn mul_zero(x: f32, zero_sign: u32) -> f32 {
  // x * (+-0.0) for a constant zero, which compilers fold to 0.0: NaN for infinite or NaN x, else a zero with the product's sign
  let ux = bitcast<u32>(x);
  return select(bitcast<f32>((ux & 0x80000000u) ^ zero_sign), nan_f32(), (ux & 0x7fffffffu) >= 0x7f800000u);
}
fn plus_zero(x: f32) -> f32 { return select(x, 0.0f, bitcast<u32>(x) == 0x80000000u); }  // x + 0.0: -0 + 0 is +0
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
fn magnitude(a: i32) -> u32 { return select(bitcast<u32>(a), 0u - bitcast<u32>(a), a < 0); }   // |MIN| is 2^31
fn idiv_i32(a: i32, b: i32) -> i32 {
  // GLSL (wgpu's OpenGL backend) leaves signed / and % undefined for negative operands, and MIN / -1 differs between
  // targets: divide the magnitudes as u32, defined everywhere, then sign the quotient (MIN / -1 wraps back to MIN)
  let q = idiv_u32(magnitude(a), magnitude(b));
  return bitcast<i32>(select(q, 0u - q, (a < 0) != (b < 0)));
}
fn imod_i32(a: i32, b: i32) -> i32 {
  let r = imod_u32(magnitude(a), magnitude(b));   // the remainder takes the sign of a (truncating division)
  return bitcast<i32>(select(r, 0u - r, a < 0));
}
fn idiv_u32(a: u32, b: u32) -> u32 { return select(a / select(b, 1u, b == 0u), 0u, b == 0u); }
fn imod_u32(a: u32, b: u32) -> u32 { return select(a % select(b, 1u, b == 0u), 0u, b == 0u); }
"""

# pin()'s zero: the kernel sets it from the dispatch's z size, which is at most 2 (dispatch_dims spreads fewer than 2^32
# threads over dimensions of 65535 workgroups or more), but only known when the kernel runs
RUNTIME_ZERO = "var<private> runtime_zero: u32;"
HELPER_FNS = {m.group(1): m.group(0) for m in re.finditer(r"^fn (\w+)\(.*?^(?=fn |\Z)", HELPERS, re.S | re.M)}

def helpers_for(body: str) -> list[str]:
  """The helper functions body calls, and the ones those call: kernels stay short to read."""
  used, text = [], body
  while (new := [n for n in HELPER_FNS if n not in used and re.search(rf"\b{n}\(", text)]):
    used += new
    text = "\n".join(HELPER_FNS[n] for n in new)
  return [HELPER_FNS[n].rstrip() for n in HELPER_FNS if n in used]

def render_const(x, dt: DType) -> str:
  if dt == dtypes.bool: return "true" if x else "false"
  if dt == dtypes.float32:
    bits = struct.unpack("<I", struct.pack("<f", float(x)))[0]
    if not math.isfinite(float(x)): return f"f32_bits({bits:#x}u)"   # not a const-expression: Tint refuses non-finite ones
    f = struct.unpack("<f", struct.pack("<I", bits))[0]
    if f == 0 and math.copysign(1, f) < 0: return "bitcast<f32>(0x80000000u)"
    text = f"{int(f)}.0f" if f == int(f) and abs(f) < 2**24 else f"{f.hex()}f"   # hex floats are exact
    return f"({text})" if f < 0 else text
  if dt in SMALL_INTS: return render_const(x, dtypes.int32 if signed(dt) else dtypes.uint32)   # in the 32-bit type it is computed in
  if dt == dtypes.uint32: return f"{int(x) & 0xffffffff}u"
  if dt == dtypes.int32: return f"{int(x)}i" if int(x) >= 0 else f"bitcast<i32>({int(x) & 0xffffffff}u)" if int(x) == -2**31 else f"({int(x)}i)"
  raise UnsupportedError(f"backend WEBGPU cannot render a constant of dtype {dt.name}")

# ***** the renderer *****

def thread_ids(ctx: CStyleKernel) -> str:
  """Every gidx comes from one flat id (of the thread, or with local ids of the workgroup), spread over up to three
  dispatch dimensions; ids past the launch size stop here."""
  gids = sorted((u for u in ctx.uops if u.op is Ops.SPECIAL and u.arg.startswith("gidx")), key=lambda s: s.arg)
  if any(u.op is Ops.SPECIAL and u.arg.startswith("lidx") for u in ctx.uops): lines = ["let flat = (wid.z * nwg.y + wid.y) * nwg.x + wid.x;"]
  else: lines = [f"let flat = (wid.z * nwg.y + wid.y) * nwg.x * {WORKGROUP_SIZE}u + wid.x * {WORKGROUP_SIZE}u + lid.x;"]
  sizes = [f"u32({ctx[s.src[0]]})" for s in gids]
  lines.append(f"if (flat >= {' * '.join(sizes) or '1u'}) {{ return; }}")
  for i, (s, size) in enumerate(zip(gids, sizes)):
    q = f"flat / ({' * '.join(sizes[:i])})" if i else "flat"
    lines.append(f"let {s.arg}: i32 = i32({q if i == len(gids) - 1 else f'({q}) % {size}'});")
  return "\n".join(lines)

def special(ctx: CStyleKernel, x: UOp) -> str:
  if x is [u for u in ctx.uops if u.op is Ops.SPECIAL][-1]: ctx.line(thread_ids(ctx))   # every launch size is known by the last one
  if x.arg.startswith("gidx"): return x.arg
  if x.src[0].op is not Ops.CONST: raise UnsupportedError(f"backend WEBGPU: local size {x.arg} must be a constant (WGSL fixes the workgroup size)")
  return f"i32(lid.{'xyz'[int(x.arg[4:])]})"

def loop_pass_count(uops: list[UOp]) -> int:
  """Each entry into a loop costs its trips plus the pass that exits (a variable bound counts at its largest value)."""
  passes, trips = 0, []
  for u in uops:
    if u.op is Ops.RANGE:
      passes += math.prod(trips) * (max(0, int(u.src[0].vmax)) + 1)
      trips.append(max(0, int(u.src[0].vmax)))
    elif u.op is Ops.ENDRANGE: trips.pop()
  return passes

def store_mask(x: UOp) -> UOp | None:
  """The bits a store of an element narrower than a word writes (codegen/emulate.py: the uint32 src past its value)."""
  return next((s for s in x.src[2:] if s.dtype == dtypes.uint32), None)
def atomic_buffers(uops: list[UOp]) -> set[int]:
  """Buffers with masked stores: their 32-bit words hold neighbours other threads write, so every access is atomic."""
  return {u.src[0].src[0].arg for u in uops if u.op is Ops.STORE and store_mask(u) is not None}

# Shader compilers (naga -> SPIR-V -> lavapipe's NIR/LLVM, Tint -> the platform compiler) apply algebraic rules that are wrong
# for IEEE when an operand is a constant 0, inf or NaN: x * 0 -> 0, x + 0 -> x, 0 - x -> -x, x / 0 -> garbage. Those cases are
# decided on the bits; every other f32 result is pinned (reassociation and fma contraction would round differently).
def is_zero(c: UOp, negative: bool | None = None) -> bool:
  return c.op is Ops.CONST and float(c.arg) == 0.0 and (negative is None or (math.copysign(1, c.arg) < 0) == negative)
def fmul(ctx: CStyleKernel, a: UOp, b: UOp) -> str:
  for x, c in ((a, b), (b, a)):
    if is_zero(c): return f"mul_zero({ctx[x]}, {0x80000000 if math.copysign(1, c.arg) < 0 else 0}u)"
  return f"pin(({ctx[a]} * {ctx[b]}))"
FLOAT_CALLS = {Ops.MAX: "ieee_max({0}, {1})", Ops.NEG: "(-{0})", Ops.TRUNC: "trunc({0})", Ops.SQRT: "pin(ieee_sqrt({0}))",
               Ops.EXP2: "pin(ieee_exp2({0}))", Ops.LOG2: "pin(ieee_log2({0}))", Ops.RECIP: "pin(ieee_div(1.0f, {0}))"}
def float_alu(ctx: CStyleKernel, x: UOp) -> str | None:
  a, op, s = x.src, x.op, ctx.args(x)
  if op is Ops.MUL: return fmul(ctx, *a)
  if op is Ops.ADD and (is_zero(a[0], False) or is_zero(a[1], False)): return f"plus_zero({s[1] if is_zero(a[0], False) else s[0]})"
  if op is Ops.SUB and is_zero(a[1], True): return f"plus_zero({s[0]})"           # x - (-0) = x + 0
  if op is Ops.SUB and is_zero(a[0], False): return f"plus_zero(-{s[1]})"         # 0 - x: +0 for x = +-0, else -x
  if op is Ops.FDIV and not (a[1].op is Ops.CONST and math.isfinite(float(a[1].arg)) and float(a[1].arg) != 0.0 and a[0].op is not Ops.CONST):
    return f"pin(ieee_div({s[0]}, {s[1]}))"
  if op in (Ops.ADD, Ops.SUB, Ops.FDIV): return f"pin(({s[0]} {ctx.ren.infix[op]} {s[1]}))"
  if op in GroupOp.Comparison:
    ordered = f"!is_nan({s[0]}) && !is_nan({s[1]})"
    return f"(!({ordered}) || {s[0]} != {s[1]})" if op is Ops.CMPNE else f"({ordered} && {s[0]} {ctx.ren.infix[op]} {s[1]})"
  return FLOAT_CALLS[op].format(*s) if op in FLOAT_CALLS else None

def int_alu(ctx: CStyleKernel, x: UOp) -> str | None:
  t, s, op = x.src[-1].dtype, ctx.args(x), x.op
  if op is Ops.MAX: return f"max({s[0]}, {s[1]})"
  if op is Ops.NEG: return f"(0u - {s[0]})" if WGSL_TYPES[t] == "u32" else f"(-{s[0]})"
  if op is Ops.MULACC: return f"({s[0]} * {s[1]} + {s[2]})"
  if op in (Ops.SHL, Ops.SHR):
    # the amount is taken mod the width here: WGSL says so for runtime amounts, but GLSL and SPIR-V leave a shift by
    # >= 32 undefined and naga need not mask it. A signed value is shifted left as its u32 bits (C++, hence Metal,
    # leaves a negative one undefined); right shifts of signed values are arithmetic in every target language
    n = f"{int(x.src[1].arg) & 31}u" if x.src[1].op is Ops.CONST else f"(u32({s[1]}) & 31u)"
    if op is Ops.SHL and signed(t): return f"bitcast<i32>(bitcast<u32>({s[0]}) << {n})"
    return f"({s[0]} {'<<' if op is Ops.SHL else '>>'} {n})"
  if op in (Ops.IDIV, Ops.MOD):
    if signed(t) and x.src[0].vmin >= 0 and x.src[1].vmin > 0:   # both known positive (index math): no signs to fix
      return f"i32(u32({s[0]}) {'/' if op is Ops.IDIV else '%'} u32({s[1]}))"
    return f"{'idiv' if op is Ops.IDIV else 'imod'}_{WGSL_TYPES[t]}({s[0]}, {s[1]})"
  return f"({s[0]} {ctx.ren.infix[op]} {s[1]})" if op in ctx.ren.infix else None

class WGSLRenderer(CStyleRenderer):
  """The WebGPU target: 32-bit types (the core packs bool, 8/16-bit ints, half and bfloat16 in u32 words and computes
  64-bit ints from 32-bit halves); flat thread ids decomposed in the shader, 32-bit addressing."""
  device, language = "WEBGPU", "WGSL"
  supported_dtypes = frozenset({dtypes.bool, dtypes.int32, dtypes.uint32, dtypes.float32, dtypes.int8, dtypes.uint8, dtypes.int16, dtypes.uint16,
                                dtypes.float16, dtypes.bfloat16, dtypes.int64, dtypes.uint64})
  # WGSL's own f16 (shader-f16) is not used: it is optional, and its conversion from f32 need not round to nearest even
  alu_dtypes = frozenset({dtypes.bool, dtypes.int32, dtypes.uint32, dtypes.float32})
  memory_word = 4                     # no 8- or 16-bit storage
  global_dims = 3
  global_max = (2**31 - 1,) * 3       # the shader recovers each id from one flat id, so only the total is bounded
  max_buffers = 8                     # WebGPU's guaranteed maxStorageBuffersPerShaderStage (browsers default to it)
  has_local = True                    # SPECIAL lidxN: local ids; the kernel's workgroup size is the lidx sizes
  has_shared = True                   # DEFINE_LOCAL: var<workgroup> arrays of 32-bit elements (the core widens narrower ones)
  shared_max = 16 << 10               # WebGPU's guaranteed maxComputeWorkgroupStorageSize
  local_max = (256, 256, 64)          # WebGPU's guaranteed maxComputeWorkgroupSize{X,Y,Z}
  max_threads_per_group = 256         # WebGPU's guaranteed maxComputeInvocationsPerWorkgroup
  index_bits = 32
  upcast_max = 4
  # WGSL's sin() is only promised on [-pi, pi] and its float % is inexact: both from the shared exact decompositions,
  # whose float32 forms need only 32-bit integers
  extra_matcher = sin_rules + fmod_rules
  exact_division = False              # WGSL lets f32 division and sqrt be 2.5 ulp off (the core still rounds half results exactly)
  # no mulacc_dtypes: WGSL's fma() has the accuracy of x * y + z, not one rounding, so products and sums stay two ops
  types = WGSL_TYPES
  bool_infix = {Ops.ADD: "||", Ops.OR: "||", Ops.MAX: "||", Ops.MUL: "&&", Ops.AND: "&&", Ops.XOR: "!="}
  infix = {**CStyleRenderer.infix, Ops.SHL: "<<", Ops.SHR: ">>"}
  let, var, loop = "let {name}: {type} = {expr};", "var {name}: {type} = {expr};", "for (var {name}: {type} = 0; {name} < {end}; {name}++) {{"
  barrier = "workgroupBarrier();"

  def use_device_limits(self, limits: dict[str, int]) -> None:
    """Called by the driver when it opens a device: describe that device's granted limits (the lesser of what the adapter
    offers and what the driver asked for) instead of WebGPU's guaranteed minimums. Without a device the defaults stay."""
    self.max_buffers = int(limits["max-storage-buffers-per-shader-stage"])
    self.local_max = tuple(int(limits[f"max-compute-workgroup-size-{d}"]) for d in "xyz")
    self.max_threads_per_group = int(limits["max-compute-invocations-per-workgroup"])

  def render(self, name: str, uops: list[UOp]) -> str:
    if (n := sum(u.op is Ops.DEFINE_GLOBAL for u in uops)) > self.max_buffers:
      raise UnsupportedError(f"backend WEBGPU: kernel {name} needs {n} storage buffers, but the limit is {self.max_buffers} (maxStorageBuffersPerShaderStage)")
    return super().render(name, uops)
  def render_const(self, v, dt: DType) -> str: return render_const(v, dt)
  def render_kernel(self, k: CStyleKernel) -> str:
    atomic, nvars = atomic_buffers(k.uops), sum(u.op is Ops.DEFINE_VAR for u in k.uops)
    decls = [f"@group(0) @binding({u.arg}) var<storage, read_write> data{u.arg}: array<{'atomic<u32>' if u.arg in atomic else k.type(u.dtype.base)}>;"
             for u in k.uops if u.op is Ops.DEFINE_GLOBAL]
    decls += [f"var<workgroup> smem{u.arg}: array<{k.type(u.dtype.base)}, {u.dtype.size}>;" for u in k.uops if u.op is Ops.DEFINE_LOCAL]
    if nvars: decls.append(f"@group(0) @binding({max((u.arg for u in k.uops if u.op is Ops.DEFINE_GLOBAL), default=-1) + 1}) "
                           f"var<uniform> {VARS_BINDING_NAME}: array<vec4<i32>, {(nvars + 3) // 4}>;")
    lines = k.lines if any(u.op is Ops.SPECIAL for u in k.uops) else k.lines[:nvars] + ["  " + ln for ln in thread_ids(k).split("\n")] + k.lines[nvars:]
    wg = [1, 1, 1]
    for u in (u for u in k.uops if u.op is Ops.SPECIAL and u.arg.startswith("lidx")): wg[int(u.arg[4:])] = int(u.src[0].arg)
    grouped = any(u.op is Ops.SPECIAL and u.arg.startswith("lidx") for u in k.uops)
    passes = loop_pass_count(k.uops)
    head = [f"// {k.name}", GROUPS_GRID if grouped else "// grid: threads"] + ([f"{LOOP_PASSES} {passes}"] if passes else [])
    helpers = helpers_for("\n".join(lines))
    if (pinned := any(h.startswith("fn pin(") for h in helpers)): decls.append(RUNTIME_ZERO)
    main = [f"@compute @workgroup_size({', '.join(map(str, wg)) if grouped else WORKGROUP_SIZE})",
            f"fn {k.name}(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, "
            "@builtin(local_invocation_id) lid: vec3<u32>) {"] + (["  runtime_zero = nwg.z >> 2u;"] if pinned else [])
    return "\n".join(head + decls + helpers + main + lines + ["}", ""])
  def render_cast(self, ctx: CStyleKernel, x: UOp) -> str:
    a, src, dst = ctx[x.src[0]], x.src[0].dtype, x.dtype
    if dst == dtypes.bool: return f"((bitcast<u32>({a}) & 0x7fffffffu) != 0u)" if src == dtypes.float32 else f"({a} != {render_const(0, src)})"
    if src == dtypes.bool: return f"select({render_const(0, dst)}, {render_const(1, dst)}, {a})"
    if dst == dtypes.float32: return f"f32({a})"   # from an int: f32 rounds it (ints up to 2^24 exactly)
    if src == dtypes.float32:   # saturating, NaN -> 0; to a small type the value is in i32/u32 range first
      conv = f"f32_to_i32({a})" if signed(dst) else f"f32_to_u32({a})"
      return conv if dst not in SMALL_INTS else f"clamp({conv}, {render_const(dtypes.min(dst), dst)}, {render_const(dtypes.max(dst), dst)})"
    return wrap(f"{WGSL_TYPES[dst]}({a})", dst)   # int <-> int keeps the bits (wraps)
  def render_bitcast(self, ctx: CStyleKernel, x: UOp) -> str: return f"bitcast<{ctx.type(x.dtype)}>({ctx[x.src[0]]})"

  rules = PatternMatcher([
    (UPat(Ops.DEFINE_GLOBAL, name="x"), lambda ctx, x: f"data{x.arg}"),   # declared with the module (render_kernel)
    (UPat(Ops.DEFINE_VAR, name="x"), lambda ctx, x: ctx.declare(ctx.ren.let, "var_" + re.sub(r"\W", "_", x.arg[0]), x.dtype,
                                                                 f"{VARS_BINDING_NAME}[{(i := [u for u in ctx.uops if u.op is Ops.DEFINE_VAR].index(x)) // 4}][{i % 4}]")),
    (UPat(Ops.SPECIAL, name="x"), special),
    (UPat(Ops.DEFINE_LOCAL, name="x"), lambda ctx, x: f"smem{x.arg}"),   # declared with the module
    (UPat(Ops.LOAD, src=(UPat(Ops.INDEX, name="i"),), allow_any_len=True),
     lambda ctx, i: f"atomicLoad(&{ctx[i]})" if i.src[0].op is Ops.DEFINE_GLOBAL and i.src[0].arg in atomic_buffers(ctx.uops) else None),
    # a word neighbouring threads write other bits of (the uint32 src is the bits this store writes): clear and set them atomically
    (UPat(Ops.STORE, name="x"), lambda ctx, x: ctx.line("atomicAnd(&{0}, ~{2});\natomicOr(&{0}, {1});".format(ctx[x.src[0]], ctx[x.src[1]], ctx[m]))
     if (m := store_mask(x)) is not None else None),
    (UPat(Ops.WHERE, name="x"), lambda ctx, x: "select({2}, {1}, {0})".format(*ctx.args(x))),
    (on(Ops.CMPLT, dtypes.bool), lambda ctx, x: "(!{} && {})".format(*ctx.args(x))),
    (on(GroupOp.ALU, dtypes.float32), float_alu),
    (on(GroupOp.ALU - {Ops.WHERE}, tuple(SMALL_INTS) + (dtypes.int32, dtypes.uint32)), int_alu),
  ]) + CStyleRenderer.rules
