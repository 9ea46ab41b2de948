"""WGSL renderer: linear UOps -> one WebGPU compute shader with IEEE-exact NaN/inf handling and packed sub-word buffers."""
from __future__ import annotations
import math, re, struct
from tinycore.dtype import DType, PtrDType, dtypes, truncate
from tinycore.uop import UOp, Ops, GroupOp
from tinycore.renderer import Renderer
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
              dtypes.int8: "i32", dtypes.uint8: "u32", dtypes.int16: "i32", dtypes.uint16: "u32",
              dtypes.float16: "f32", dtypes.bfloat16: "f32"}
# WGSL has no 8- or 16-bit storage: these live 4 or 2 to a u32 word (stores are atomic: neighbours share the word)
PACKED = (dtypes.bool, dtypes.int8, dtypes.uint8, dtypes.int16, dtypes.uint16, dtypes.float16, dtypes.bfloat16)
# 8- and 16-bit integers are computed in i32/u32 and wrapped back to their width after every op (the UOp semantics)
SMALL_INTS = {dtypes.int8: 8, dtypes.uint8: 8, dtypes.int16: 16, dtypes.uint16: 16}
# half and bfloat16 are stored as their 16 bits and held in f32 registers, always exactly a value of their type: loads
# widen the bits exactly, and every op result is rounded back (to nearest even) in integer code. WGSL's own f16
# (shader-f16) is not used: it is optional, and its conversion from f32 need not round to nearest even. One f32 add,
# mul, div or sqrt rounded once to half is the correctly rounded half result (24 >= 2*11 + 2 bits); bfloat16, like the
# reference semantics, is float32 math rounded after every op. {dtype: (bits -> f32, f32 -> bits, f32 -> rounded f32)}
SMALL_FLOATS = {dtypes.float16: ("f16_to_f32", "f16_bits", "f16_round"), dtypes.bfloat16: ("bf16_to_f32", "bf16_bits", "bf16_round")}
EXACT_OPS = (Ops.NEG, Ops.MAX, Ops.TRUNC, Ops.WHERE)   # results that are already values of the operands' float type
ROUNDED = ("f16_div(", "f16_sqrt(")   # half helpers that round themselves (WGSL's f32 division and sqrt may be inexact)

def round_to(expr: str, dt: DType) -> str:
  """expr (an f32 value) rounded to dt when dt is half or bfloat16."""
  return f"{SMALL_FLOATS[dt][2]}({expr})" if dt in SMALL_FLOATS else expr

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
fn f16_to_f32(h: u32) -> f32 {
  // the low 16 bits of h as a half, widened exactly: subnormals normalised, inf and NaN keep sign and payload
  let s = (h & 0x8000u) << 16u;
  let e = (h >> 10u) & 0x1fu;
  let m = h & 0x3ffu;
  if (e == 0x1fu) { return bitcast<f32>(s | 0x7f800000u | (m << 13u)); }
  if (e != 0u) { return bitcast<f32>(s | ((e + 112u) << 23u) | (m << 13u)); }
  if (m == 0u) { return bitcast<f32>(s); }
  let p = firstLeadingBit(m);   // m * 2^-24 = 1.f * 2^(p - 24)
  return bitcast<f32>(s | ((p + 103u) << 23u) | ((m << (23u - p)) & 0x7fffffu));
}
fn f16_bits(x: f32) -> u32 {
  // x rounded to the nearest half, ties to even, as its bits: 65520 and up overflow to inf, values under 2^-14 round on
  // the subnormal grid (2^-24), NaN stays NaN with its sign and the top of its payload (quiet stays quiet)
  let b = bitcast<u32>(x);
  let s = (b >> 16u) & 0x8000u;
  let a = b & 0x7fffffffu;
  if (a > 0x7f800000u) { let pm = (a >> 13u) & 0x3ffu; return s | 0x7c00u | select(pm, 0x200u, pm == 0u); }
  if (a >= 0x477ff000u) { return s | 0x7c00u; }
  if (a >= 0x38800000u) { return s | ((a + 0xfffu + ((a >> 13u) & 1u) - 0x38000000u) >> 13u); }
  let e = a >> 23u;
  if (e < 102u) { return s; }   // under 2^-25 (f32 subnormals included): rounds to a zero
  let m = (a & 0x7fffffu) | 0x800000u;
  let sh = 126u - e;            // 14..24: |x| / 2^-24 = m >> sh, plus the rounding of what is shifted out
  let q = m >> sh;
  let rest = m & ((1u << sh) - 1u);
  let tie = 1u << (sh - 1u);
  return s | (q + select(0u, 1u, rest > tie || (rest == tie && (q & 1u) == 1u)));
}
fn f16_round(x: f32) -> f32 { return f16_to_f32(f16_bits(x)); }
fn f16_div(a: f32, b: f32) -> f32 { return f16_quotient(a, b, ieee_div(a, b)); }
fn f16_quotient(a: f32, b: f32, q: f32) -> f32 {
  // a / b of two halves, correctly rounded from q, an f32 quotient WGSL lets be 2.5 ulp off: the exact quotient is that
  // close to q, so it can only lie past the half midpoint next to q's rounding, and the midpoint (12 bits) times b
  // (11 bits) is exact in f32, so comparing it with a decides (ties, possible among subnormals, go to even)
  let h = f16_round(q);
  let ua = bitcast<u32>(a) & 0x7fffffffu;
  let ub = bitcast<u32>(b) & 0x7fffffffu;
  if (ua == 0u || ub == 0u || ua >= 0x7f800000u || ub >= 0x7f800000u || abs(q) == abs(h)) { return h; }
  let hb = f16_bits(abs(h));
  let up = abs(q) > abs(h);
  let nb = select(hb - 1u, hb + 1u, up);
  let m = select((f16_to_f32(hb) + f16_to_f32(nb)) * 0.5f, 65520.0f, max(hb, nb) == 0x7c00u);
  let c = m * bitcast<f32>(ub);
  let x = bitcast<f32>(ua);
  let pick = select(hb, nb, select((x < c), (x > c), up) || (x == c && (nb & 1u) == 0u));
  return bitcast<f32>(bitcast<u32>(f16_to_f32(pick)) | (bitcast<u32>(q) & 0x80000000u));
}
fn f16_sqrt(x: f32) -> f32 { return f16_root(x, ieee_sqrt(x)); }
fn f16_root(x: f32, r: f32) -> f32 {
  // sqrt of a half, correctly rounded from r, an f32 root WGSL lets be inexact: the midpoint next to r's rounding
  // squared is exact in f32 (never equal to a half, so no ties)
  let h = f16_round(r);
  if (bitcast<u32>(x) - 1u >= 0x7f7fffffu || r == h) { return h; }   // +-0, negative, inf, NaN: nothing to round
  let hb = f16_bits(h);
  let up = r > h;
  let nb = select(hb - 1u, hb + 1u, up);
  let m = (f16_to_f32(hb) + f16_to_f32(nb)) * 0.5f;
  let c = m * m;
  return f16_to_f32(select(hb, nb, select((x < c), (x > c), up)));
}
fn bf16_to_f32(h: u32) -> f32 { return bitcast<f32>((h & 0xffffu) << 16u); }
fn bf16_bits(x: f32) -> u32 {
  // nearest bfloat16, ties to even; NaN stays a NaN: a bfloat16 NaN's bits as they are, another made quiet
  let b = bitcast<u32>(x);
  if ((b & 0x7fffffffu) > 0x7f800000u) { return ((b >> 16u) | select(0u, 0x40u, (b & 0xffffu) != 0u)) & 0xffffu; }
  return (b + 0x7fffu + ((b >> 16u) & 1u)) >> 16u;
}
fn bf16_round(x: f32) -> f32 { return bf16_to_f32(bf16_bits(x)); }
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
fn odd8_u32(a: u32) -> u32 {
  // past 2^24 (where f32 rounds), rounded to odd at bit 8: its bits below cut, bit 8 set if any was; then exact in f32,
  // from which it rounds once to bfloat16
  return select(a, (a & 0xffffff00u) | select(0u, 0x100u, (a & 0xffu) != 0u), a >= 0x1000000u);
}
fn odd8_i32(a: i32) -> i32 { return select(a, (a & -256i) | select(0i, 256i, (a & 255i) != 0i), a >= 0x1000000i || a <= -0x1000000i); }
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

def wgsl_type(dt: DType) -> str:
  if dt.scalar not in WGSL_TYPES: raise UnsupportedError(f"backend WEBGPU does not support dtype {dt.scalar.name} in WGSL")
  return WGSL_TYPES[dt.scalar]

def render_const(x, dt: DType) -> str:
  if dt == dtypes.bool: return "true" if x else "false"
  if dt in SMALL_FLOATS: return render_const(truncate(dt, x), dtypes.float32)   # the f32 holding exactly that value
  if dt == dtypes.float32:
    bits = struct.unpack("<I", struct.pack("<f", float(x)))[0]
    if not math.isfinite(float(x)): return f"f32_bits({bits:#x}u)"   # not a const-expression: Tint refuses non-finite ones
    f = struct.unpack("<f", struct.pack("<I", bits))[0]
    if f == 0 and math.copysign(1, f) < 0: return "bitcast<f32>(0x80000000u)"
    text = f"{int(f)}.0f" if f == int(f) and abs(f) < 2**24 else f"{f.hex()}f"   # hex floats are exact
    return f"({text})" if f < 0 else text
  if dt in SMALL_INTS:   # the value wrapped to the width, written in the 32-bit type it is computed in
    bits = SMALL_INTS[dt]
    v = int(x) & ((1 << bits) - 1)
    if signed(dt) and v >= 1 << (bits - 1): v -= 1 << bits
    return render_const(v, dtypes.int32 if signed(dt) else dtypes.uint32)
  if dt == dtypes.uint32: return f"{int(x) & 0xffffffff}u"
  if dt == dtypes.int32: return f"{int(x)}i" if int(x) >= 0 else f"bitcast<i32>({int(x) & 0xffffffff}u)" if int(x) == -2**31 else f"({int(x)}i)"
  raise UnsupportedError(f"backend WEBGPU cannot render a constant of dtype {dt.name}")

class WGSLRenderer(Renderer):
  """The WebGPU target: 32-bit types, plus bool, 8/16-bit ints, half and bfloat16 packed in u32 words; flat thread ids
  decomposed in the shader, 32-bit addressing."""
  device = "WEBGPU"
  supported_dtypes = frozenset({dtypes.bool, dtypes.int32, dtypes.uint32, dtypes.float32, dtypes.int8, dtypes.uint8, dtypes.int16, dtypes.uint16,
                                dtypes.float16, dtypes.bfloat16})
  global_dims = 3
  global_max = (2**31 - 1,) * 3       # the shader recovers each id from one flat id, so only the total is bounded
  max_buffers = 8                     # WebGPU's guaranteed maxStorageBuffersPerShaderStage (browsers default to it)
  has_local = True                    # SPECIAL lidxN: local ids; the kernel's workgroup size is the lidx sizes
  has_shared = True                   # DEFINE_LOCAL: var<workgroup> arrays of the register type; BARRIER: workgroupBarrier()
  shared_max = 16 << 10               # WebGPU's guaranteed maxComputeWorkgroupStorageSize
  local_max = (256, 256, 64)          # WebGPU's guaranteed maxComputeWorkgroupSize{X,Y,Z}
  max_threads_per_group = 256         # WebGPU's guaranteed maxComputeInvocationsPerWorkgroup
  index_bits = 32
  upcast_max = 4
  # WGSL's sin() is only promised on [-pi, pi] and its float % is inexact: both from the shared exact decompositions,
  # whose float32 forms need only 32-bit integers
  extra_matcher = sin_rules + fmod_rules

  def use_device_limits(self, limits: dict[str, int]) -> None:
    """Called by the driver when it opens a device: describe that device's granted limits (the lesser of what the adapter
    offers and what the driver asked for) instead of WebGPU's guaranteed minimums. Without a device the defaults stay."""
    self.max_buffers = int(limits["max-storage-buffers-per-shader-stage"])
    self.local_max = tuple(int(limits[f"max-compute-workgroup-size-{d}"]) for d in "xyz")
    self.max_threads_per_group = int(limits["max-compute-invocations-per-workgroup"])

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
    self.stored = {u.src[0].src[0].arg for u in uops if u.op is Ops.STORE and u.src[0].src[0].op is Ops.DEFINE_GLOBAL}
    self.vars = [u for u in uops if u.op is Ops.DEFINE_VAR]
    self.params_by_arg = dict(self.params)
    self.names: dict[UOp, str] = {}
    self.lines: list[str] = []
    self.depth = 1
    self.workgroup: tuple[int, int, int] | None = None   # set when the kernel has local ids
    self.open_loops: list[int] = []   # the trips of the loops around the line being written, outermost first
    self.loop_passes = 0

  def line(self, s: str) -> None: self.lines.append("  " * self.depth + s)
  def is_atomic(self, p: int) -> bool: return self.params_by_arg[p].dtype.base.scalar in PACKED and p in self.stored

  def declarations(self) -> list[str]:
    out = []
    for p, u in self.params:
      base = u.dtype.base.scalar
      elem = ("atomic<u32>" if p in self.stored else "u32") if base in PACKED else wgsl_type(base)
      out.append(f"@group(0) @binding({p}) var<storage, read_write> data{p}: array<{elem}>;")
    for u in self.uops:   # shared memory holds values as registers do (a half in an f32), so nothing is packed
      if u.op is Ops.DEFINE_LOCAL: out.append(f"var<workgroup> smem{u.arg}: array<{wgsl_type(u.dtype.base)}, {u.dtype.size}>;")
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
    """Every gidx comes from one flat id (of the thread, or with local ids of the workgroup), spread over up to three
    dispatch dimensions; ids past the launch size stop here. lidxN is the local id along N, its size the workgroup size."""
    specials = sorted((u for u in self.uops if u.op is Ops.SPECIAL), key=lambda s: s.arg)
    gids = [s for s in specials if s.arg.startswith("gidx")]
    lids = [s for s in specials if s.arg.startswith("lidx")]
    if (other := [s.arg for s in specials if s not in gids and s not in lids]): raise UnsupportedError(f"backend WEBGPU: unknown thread ids {other}")
    if lids:
      wg = [1, 1, 1]
      for l in lids:
        if l.src[0].op is not Ops.CONST: raise UnsupportedError(f"backend WEBGPU: local size {l.arg} must be a constant (WGSL fixes the workgroup size)")
        wg[int(l.arg[4:])] = int(l.src[0].arg)
        self.names[l] = f"i32(lid.{'xyz'[int(l.arg[4:])]})"
      self.workgroup = (wg[0], wg[1], wg[2])
      self.line("let flat = (wid.z * nwg.y + wid.y) * nwg.x + wid.x;")
    else: self.line(f"let flat = (wid.z * nwg.y + wid.y) * nwg.x * {WORKGROUP_SIZE}u + wid.x * {WORKGROUP_SIZE}u + lid.x;")
    sizes = [f"u32({self.ref(s.src[0])})" for s in gids]
    self.line(f"if (flat >= {' * '.join(sizes) or '1u'}) {{ return; }}")
    stride = ""
    for i, (s, size) in enumerate(zip(gids, sizes)):
      q = f"flat / ({stride})" if stride else "flat"
      self.names[s] = f"gidx{i}"
      self.line(f"let gidx{i}: i32 = i32({q if i == len(gids) - 1 else f'({q}) % {size}'});")
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
    wg = self.workgroup
    head = [f"// {self.name}", GROUPS_GRID if wg else "// grid: threads"] + ([f"{LOOP_PASSES} {self.loop_passes}"] if self.loop_passes else [])
    helpers = helpers_for("\n".join(self.lines))
    if (pinned := any(h.startswith("fn pin(") for h in helpers)): decls.append(RUNTIME_ZERO)
    main = [f"@compute @workgroup_size({', '.join(map(str, wg)) if wg else WORKGROUP_SIZE})",
            f"fn {self.name}(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, "
            "@builtin(local_invocation_id) lid: vec3<u32>) {"] + (["  runtime_zero = nwg.z >> 2u;"] if pinned else [])
    return "\n".join(head + decls + helpers + main + self.lines + ["}", ""])

  def emit(self, u: UOp) -> None:
    op = u.op
    if op in (Ops.DEFINE_GLOBAL, Ops.SPECIAL, Ops.DEFINE_VAR): return
    if op is Ops.DEFINE_LOCAL: self.names[u] = f"smem{u.arg}"; return
    if op is Ops.BARRIER:
      self.line("workgroupBarrier();")
      self.names[u] = ""
      return
    if op is Ops.INDEX: self.names[u] = ""; return   # addresses are used by LOAD/STORE directly
    if op is Ops.RANGE:
      n = f"ridx{u.arg[0]}"
      trips = max(0, int(u.src[0].vmax))   # a variable bound counts at its largest value
      self.loop_passes += math.prod(self.open_loops) * (trips + 1)
      self.open_loops.append(trips)
      self.line(f"for (var {n}: {wgsl_type(u.dtype)} = 0; {n} < {self.ref(u.src[0])}; {n}++) {{")
      self.names[u] = n
      self.depth += 1
      return
    if op is Ops.ENDRANGE:
      self.open_loops.pop()
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
      if (gate := next((g for g in u.src[2:] if g.dtype == dtypes.bool), None)) is not None:
        self.line(f"if ({self.ref(gate)}) {{")
        self.depth += 1
      self.store(u.src[0], u.src[1])
      if gate is not None:
        self.depth -= 1
        self.line("}")
      self.names[u] = ""
      return
    if op is Ops.CAST: return self.bind(u, self.cast(u.src[0], u.dtype))
    if op is Ops.BITCAST: return self.bind(u, self.bitcast(u.src[0], u.dtype))
    if op in GroupOp.ALU:
      expr = self.alu(op, u.dtype, u.src)
      if op is not Ops.WHERE: expr = wrap(expr, u.dtype.scalar)
      if op not in EXACT_OPS and not expr.startswith(ROUNDED): expr = round_to(expr, u.dtype.scalar)
      # float32 results are pinned (half and bfloat16 ones already pass through integer rounding code)
      if u.dtype.scalar == dtypes.float32 and op not in EXACT_OPS: expr = f"pin({expr})"
      return self.bind(u, expr)
    raise UnsupportedError(f"backend WEBGPU cannot render {op} in kernel {self.name}")

  # ***** memory *****

  def address(self, idx: UOp) -> tuple[int, DType, str]:
    buf, i = idx.src[0], idx.src[1]
    return buf.arg, buf.dtype.base.scalar, self.ref(i)

  def packing(self, dt: DType, i: str) -> tuple[str, str, str]:
    """(word index, bit shift, mask) of element i of a packed buffer of dt."""
    per, bits = 4 // dt.itemsize, 8 * dt.itemsize
    return f"{i} >> {per.bit_length() - 1}u", f"(u32({i} & {per - 1}) * {bits}u)", f"{(1 << bits) - 1:#x}u"

  def load(self, idx: UOp) -> str:
    if idx.src[0].op is Ops.DEFINE_LOCAL: return f"{self.ref(idx.src[0])}[{self.ref(idx.src[1])}]"
    p, dt, i = self.address(idx)
    if dt not in PACKED: return f"data{p}[{i}]"
    w, shift, mask = self.packing(dt, i)
    word = f"atomicLoad(&data{p}[{w}])" if self.is_atomic(p) else f"data{p}[{w}]"
    e = f"(({word} >> {shift}) & {mask})"
    if dt == dtypes.bool: return f"({e} != 0u)"
    if dt in SMALL_FLOATS: return f"{SMALL_FLOATS[dt][0]}({e})"
    return wrap(f"bitcast<i32>({e})", dt) if signed(dt) else e

  def store(self, idx: UOp, val: UOp) -> None:
    if idx.src[0].op is Ops.DEFINE_LOCAL: return self.line(f"{self.ref(idx.src[0])}[{self.ref(idx.src[1])}] = {self.ref(val)};")
    p, dt, i = self.address(idx)
    if dt not in PACKED: return self.line(f"data{p}[{i}] = {self.ref(val)};")
    # neighbouring threads own the other elements of this word: clear and set ours atomically
    w, shift, mask = self.packing(dt, i)
    v = (f"select(0u, 1u, {self.ref(val)})" if dt == dtypes.bool else f"{SMALL_FLOATS[dt][1]}({self.ref(val)})" if dt in SMALL_FLOATS
         else f"(bitcast<u32>({self.ref(val)}) & {mask})")
    self.line(f"atomicAnd(&data{p}[{w}], ~({mask} << {shift}));")
    self.line(f"atomicOr(&data{p}[{w}], {v} << {shift});")

  # ***** arithmetic *****

  def bitcast(self, x: UOp, dt: DType) -> str:
    src, dst, a = x.dtype.scalar, dt.scalar, self.ref(x)
    if dt.itemsize != x.dtype.itemsize or dtypes.bool in (src, dst):
      raise UnsupportedError(f"backend WEBGPU cannot bitcast {x.dtype.name} to {dt.name}")
    if src not in SMALL_FLOATS and dst not in SMALL_FLOATS: return wrap(f"bitcast<{wgsl_type(dt)}>({a})", dst)
    # 16 bits: half and bfloat16 values go through their bits (the 16-bit ints hold theirs sign-extended in 32)
    bits = f"{SMALL_FLOATS[src][1]}({a})" if src in SMALL_FLOATS else f"(bitcast<u32>({a}) & 0xffffu)"
    if dst in SMALL_FLOATS: return f"{SMALL_FLOATS[dst][0]}({bits})"
    return wrap(f"bitcast<{wgsl_type(dt)}>({bits})", dst)

  def cast(self, x: UOp, dt: DType) -> str:
    src, a = x.dtype.scalar, self.ref(x)
    wt = wgsl_type(dt)
    if src == dt.scalar: return a
    isf = dtypes.is_float(src)
    if dt == dtypes.bool: return f"((bitcast<u32>({a}) & 0x7fffffffu) != 0u)" if isf else f"({a} != {render_const(0, src)})"
    if src == dtypes.bool: return f"select({render_const(0, dt)}, {render_const(1, dt)}, {a})"
    if dtypes.is_float(dt.scalar):   # from a float: the value is exact in f32; from an int: f32 rounds it (ints up to 2^24 exactly)
      if dt == dtypes.bfloat16 and src in (dtypes.int32, dtypes.uint32): a = f"odd8_{wgsl_type(x.dtype)}({a})"   # rounded once
      return round_to(a if isf else f"f32({a})", dt.scalar)
    if isf and dt.scalar in SMALL_INTS:   # saturate to the small range (the value is in i32/u32 range then)
      lo, hi = (-(1 << (SMALL_INTS[dt.scalar] - 1)), (1 << (SMALL_INTS[dt.scalar] - 1)) - 1) if signed(dt.scalar) else (0, (1 << SMALL_INTS[dt.scalar]) - 1)
      conv = "f32_to_i32" if signed(dt.scalar) else "f32_to_u32"
      return f"clamp({conv}({a}), {render_const(lo, dt.scalar)}, {render_const(hi, dt.scalar)})"
    if isf and dt == dtypes.int32: return f"f32_to_i32({a})"
    if isf and dt == dtypes.uint32: return f"f32_to_u32({a})"
    return wrap(f"{wt}({a})", dt.scalar)   # int<->int keeps the bits (wraps); int->float rounds to nearest

  def alu(self, op: Ops, dt: DType, srcs: tuple[UOp, ...]) -> str:
    s = [self.ref(x) for x in srcs]
    t = srcs[-1].dtype.scalar   # operand dtype (comparisons return bool from non-bool operands)
    isf, isb = dtypes.is_float(t), t == dtypes.bool
    if op is Ops.WHERE: return f"select({s[2]}, {s[1]}, {s[0]})"
    if op is Ops.MULACC:   # the product is rounded to the type before the add (as two ops would be)
      product = self.fmul(srcs[0], srcs[1])
      return f"({round_to(product, t) if t in SMALL_FLOATS else f'pin({product})'} + {s[2]})" if isf else f"({s[0]} * {s[1]} + {s[2]})"
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
    if t == dtypes.float16 and op in (Ops.FDIV, Ops.RECIP, Ops.SQRT):
      return f"f16_sqrt({s[0]})" if op is Ops.SQRT else f"f16_div({'1.0f' if op is Ops.RECIP else s[0]}, {s[-1]})"
    if isf and op in (Ops.ADD, Ops.SUB, Ops.MUL, Ops.FDIV): return self.float_binary(op, srcs)
    if op in (Ops.ADD, Ops.SUB, Ops.MUL, Ops.XOR, Ops.OR, Ops.AND):
      sym = {Ops.ADD: "+", Ops.SUB: "-", Ops.MUL: "*", Ops.XOR: "^", Ops.OR: "|", Ops.AND: "&"}[op]
      return f"({s[0]} {sym} {s[1]})"
    if op in (Ops.SHL, Ops.SHR):
      # the amount is taken mod the width here: WGSL says so for runtime amounts, but GLSL and SPIR-V leave a shift by
      # >= 32 undefined and naga need not mask it. A signed value is shifted left as its u32 bits (C++, hence Metal,
      # leaves a negative one undefined); right shifts of signed values are arithmetic in every target language
      bits = 8 * t.itemsize
      amount = f"{int(srcs[1].arg) & (bits - 1)}u" if srcs[1].op is Ops.CONST else f"(u32({s[1]}) & {bits - 1}u)"
      if op is Ops.SHL and signed(t): return f"bitcast<i32>(bitcast<u32>({s[0]}) << {amount})"
      return f"({s[0]} {'<<' if op is Ops.SHL else '>>'} {amount})"
    if op in (Ops.IDIV, Ops.MOD) and not isf:
      if signed(t) and srcs[0].vmin >= 0 and srcs[1].vmin > 0:   # both known positive (index math): no signs to fix
        return f"i32(u32({s[0]}) {'/' if op is Ops.IDIV else '%'} u32({s[1]}))"
      return f"{'idiv' if op is Ops.IDIV else 'imod'}_{wgsl_type(t)}({s[0]}, {s[1]})"
    if op is Ops.MAX: return f"ieee_max({s[0]}, {s[1]})" if isf else f"max({s[0]}, {s[1]})"
    if op is Ops.NEG: return f"(0u - {s[0]})" if wgsl_type(t) == "u32" else f"(-{s[0]})"
    if isf:
      unary = {Ops.EXP2: "ieee_exp2", Ops.LOG2: "ieee_log2", Ops.SQRT: "ieee_sqrt", Ops.TRUNC: "trunc"}
      if op in unary: return f"{unary[op]}({s[0]})"
      if op is Ops.RECIP: return f"ieee_div(1.0f, {s[0]})"
    if op is Ops.TRUNC: return s[0]
    raise UnsupportedError(f"backend WEBGPU has no {op} on {t.name}")

  # ***** float arithmetic the WGSL compiler may not rewrite *****
  # Shader compilers (naga -> SPIR-V -> lavapipe's NIR/LLVM, Tint -> the platform compiler) apply algebraic rules that
  # are wrong for IEEE when an operand is a constant 0, inf or NaN: x * 0 -> 0, x + 0 -> x, 0 - x -> -x, x / 0 -> garbage.
  # Those cases are written so the result is decided on the bits; everything else is plain WGSL arithmetic.

  def fmul(self, a: UOp, b: UOp) -> str:
    for x, c in ((a, b), (b, a)):
      if c.op is Ops.CONST and float(c.arg) == 0.0: return f"mul_zero({self.ref(x)}, {0x80000000 if math.copysign(1, c.arg) < 0 else 0}u)"
    return f"({self.ref(a)} * {self.ref(b)})"

  def float_binary(self, op: Ops, srcs: tuple[UOp, ...]) -> str:
    a, b = srcs
    sa, sb = self.ref(a), self.ref(b)
    def zero(c: UOp, negative: bool) -> bool:
      return c.op is Ops.CONST and float(c.arg) == 0.0 and (math.copysign(1, c.arg) < 0) == negative
    if op is Ops.MUL: return self.fmul(a, b)
    if op is Ops.ADD:
      if zero(b, False): return f"plus_zero({sa})"
      if zero(a, False): return f"plus_zero({sb})"
      return f"({sa} + {sb})"
    if op is Ops.SUB:
      if zero(b, True): return f"plus_zero({sa})"           # x - (-0) = x + 0
      if zero(a, False): return f"plus_zero(-{sb})"         # 0 - x: +0 for x = +-0, else -x
      return f"({sa} - {sb})"
    if b.op is Ops.CONST and math.isfinite(float(b.arg)) and float(b.arg) != 0.0 and a.op is not Ops.CONST: return f"({sa} / {sb})"
    return f"ieee_div({sa}, {sb})"
