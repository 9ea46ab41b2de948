"""The base of renderers for C-like languages (C, OpenCL C, WGSL): a kernel written by a rule table from UOps to text. The base
speaks C (integer math wrapping, as with -fwrapv); a language sets its types, operators, builtins and declarations as data and
puts the rules where it differs in front of the base's."""
from __future__ import annotations
import math, re
from tinycore.dtype import DType, dtypes, FLOATS, INTS
from tinycore.uop import UOp, Ops, GroupOp
from tinycore.rewrite import PatternMatcher, UPat
from tinycore.renderer import Renderer, KernelWriter, on
from tinycore.runtime.errors import UnsupportedError

BOUND = GroupOp.ALU | {Ops.LOAD, Ops.CAST, Ops.BITCAST}   # ops whose text is an expression the kernel names in a declaration

class CStyleKernel(KernelWriter):
  """One kernel being written: each value's text (its name, or an inline constant), the lines so far, the parameters, the
  helper functions used. Rules write through it: line(), open() and close() a block, param(), helper()."""
  def __init__(self, ren: CStyleRenderer, name: str, uops: list[UOp]):
    super().__init__(ren, name, uops)
    self.params: list[str] = []
    self.helpers: dict[str, str] = {}
    self.depth = 1
  def type(self, dt: DType) -> str:
    if dt.count > 1 and self.ren.vector_type: return self.ren.vector_type.format(type=self.type(dt.scalar), n=dt.count)
    if dt not in self.ren.types: raise UnsupportedError(f"backend {self.ren.device}: the {self.ren.language} renderer has no type for {dt}")
    return self.ren.types[dt]
  def line(self, s: str) -> str:
    self.lines.extend("  " * self.depth + x for x in s.split("\n"))
    return ""
  def open(self, s: str, name: str = "") -> str:
    self.line(s)
    self.depth += 1
    return name
  def close(self) -> str:
    self.depth -= 1
    return self.line("}")
  def param(self, decl: str, name: str) -> str:
    self.params.append(decl)
    return name
  def helper(self, name: str, text: str) -> str:
    self.helpers.setdefault(name, text)
    return name
  def write(self, u: UOp) -> str:
    """A value op's expression is declared (bound to a name); a store's bool gate (a src past its value) wraps it in an if."""
    if u.dtype.count > 1 and not self.ren.vector_type: raise UnsupportedError(f"backend {self.ren.device}: the {self.ren.language} renderer has no vector values ({u.dtype})")
    gate = next((g for g in u.src[2:] if g.dtype == dtypes.bool), None) if u.op is Ops.STORE else None
    if gate is not None: self.open(f"if ({self[gate]}) {{")
    text = super().write(u)
    if gate is not None: self.close()
    return self.declare(self.ren.let, f"v{len(self.lines)}", u.dtype, text) if u.op in BOUND else text
  def declare(self, template: str, name: str, dt: DType, expr: str) -> str:
    self.line(template.format(type=self.type(dt), name=name, expr=expr))
    return name

def div_guarded(ctx: CStyleKernel, x: UOp) -> str:
  """Truncating integer division that never traps: a zero divisor gives 0, MIN / -1 wraps (MIN % -1 is 0)."""
  a, b = ctx.args(x)
  t, q = ctx.type(x.dtype), "%" if x.op is Ops.MOD else "/"
  if dtypes.is_unsigned(x.dtype): return f"({b} == 0 ? ({t})0 : ({t})({a} {q} {b}))"
  mn = ctx.ren.render_const(dtypes.min(x.dtype), x.dtype)
  return f"({b} == 0 ? ({t})0 : ({a} == {mn} && {b} == -1) ? ({t})({a if q == '/' else 0}) : ({t})({a} {q} {b}))"

def float_to_int(ctx: CStyleKernel, x: UOp) -> str:
  """A saturating conversion (NaN -> 0), through a helper function per integer type."""
  d, t = x.dtype, ctx.type(x.dtype)
  lo, hi = ctx.ren.render_const(dtypes.min(d), d), ctx.ren.render_const(dtypes.max(d), d)
  fn = ctx.helper(f"tc_{d.name}_sat", f"static inline {t} tc_{d.name}_sat(double x) {{  /* saturating, NaN -> 0 */\n  if (x != x) return 0;\n"
                  f"  if (x >= {float(dtypes.max(d))!r}) return {hi};\n  if (x <= {float(dtypes.min(d))!r}) return {lo};\n  return ({t})x;\n}}")
  return f"{fn}((double){ctx[x.src[0]]})"

class CStyleRenderer(Renderer):
  """C by default: `types` names each dtype, `infix`/`functions` the operators and builtins, `let`/`var`/`loop` the
  declarations; `render_kernel` wraps the body in the kernel's signature, `render_const` writes constants."""
  language = "C"
  types: dict[DType, str] = {dtypes.bool: "_Bool", dtypes.int8: "int8_t", dtypes.uint8: "uint8_t", dtypes.int16: "int16_t",
    dtypes.uint16: "uint16_t", dtypes.int32: "int32_t", dtypes.uint32: "uint32_t", dtypes.int64: "int64_t", dtypes.uint64: "uint64_t",
    dtypes.float16: "_Float16", dtypes.float32: "float", dtypes.float64: "double"}
  infix = {Ops.ADD: "+", Ops.SUB: "-", Ops.MUL: "*", Ops.FDIV: "/", Ops.AND: "&", Ops.OR: "|", Ops.XOR: "^", Ops.CMPLT: "<",
           Ops.CMPNE: "!=", Ops.CMPEQ: "=="}
  bool_infix = {Ops.ADD: "|", Ops.OR: "|", Ops.MAX: "|", Ops.MUL: "&", Ops.AND: "&", Ops.XOR: "^", Ops.SUB: "^"}
  functions = {Ops.SQRT: "sqrt", Ops.TRUNC: "trunc", Ops.EXP2: "exp2", Ops.LOG2: "log2", Ops.SIN: "sin", Ops.MOD: "fmod"}
  float_suffix = {dtypes.float32: "f"}          # a float builtin's name for the dtype: sqrtf
  let = "{type} {name} = {expr};"              # a value
  var = "{type} {name} = {expr};"              # a mutable accumulator
  loop = "for ({type} {name} = 0; {name} < {end}; {name}++) {{"
  buffer = "{type}* {name}"                    # a kernel parameter of a buffer, of elements of memory_types (else types)
  memory_types: dict[DType, str] = {}
  vector_type = ""                             # a vector of n values ("{type}{n}": OpenCL's float4); "" where the language has none
  shared = "{type} {name}[{size}];"            # workgroup shared memory (DEFINE_LOCAL), and the barrier every thread of a block meets
  barrier = ""
  prelude = "#include <stdint.h>\n#include <string.h>\n#include <math.h>"

  def render(self, name: str, uops: list[UOp]) -> str: return self.render_kernel(CStyleKernel(self, name, uops).write_all())
  def render_kernel(self, k: CStyleKernel) -> str:
    return "\n".join([self.prelude, *k.helpers.values(), f"void {k.name}({', '.join(k.params)}) {{", *k.lines, "}", ""])
  def render_const(self, v, dt: DType) -> str:
    if dt == dtypes.bool: return "1" if v else "0"
    if dtypes.is_int(dt):
      if v == dtypes.min(dt) and not dtypes.is_unsigned(dt): return f"(({self.types[dt]})({v + 1}LL - 1))"   # no literal holds MIN
      return f"(({self.types[dt]}){int(v)}{'ULL' if dtypes.is_unsigned(dt) else 'LL'})"
    f = self.float_suffix.get(dt, "")
    text = f"__builtin_nan{f}(\"\")" if math.isnan(v) else f"({'-' if v < 0 else ''}__builtin_inf{f}())" if math.isinf(v) else float(v).hex() + f
    return text if dt in self.float_suffix or dt == dtypes.float64 else f"(({self.types[dt]}){text})"
  def render_cast(self, ctx: CStyleKernel, x: UOp) -> str:
    a, src, dst = ctx[x.src[0]], x.src[0].dtype, x.dtype
    if dst == dtypes.bool: return f"({a} != 0)"
    if dtypes.is_int(dst) and dtypes.is_float(src): return float_to_int(ctx, x)
    return f"(({ctx.type(dst)}){a})"
  def render_bitcast(self, ctx: CStyleKernel, x: UOp) -> str:
    return f"({{ {ctx.type(x.dtype)} _d; {ctx.type(x.src[0].dtype)} _s = {ctx[x.src[0]]}; memcpy(&_d, &_s, sizeof(_d)); _d; }})"
  def render_special(self, ctx: CStyleKernel, x: UOp) -> str: raise UnsupportedError(f"backend {self.device}: no thread id {x.arg}")

  rules = PatternMatcher([
    (UPat(Ops.CONST, name="x"), lambda ctx, x: ctx.ren.render_const(x.arg, x.dtype)),
    (UPat(Ops.DEFINE_GLOBAL, name="x"), lambda ctx, x: ctx.param(ctx.ren.buffer.format(
      type=ctx.ren.memory_types.get(x.dtype.base) or ctx.type(x.dtype.base), name=f"data{x.arg}"), f"data{x.arg}")),
    (UPat(Ops.DEFINE_VAR, name="x"), lambda ctx, x: ctx.param(f"{ctx.type(x.dtype)} {(n := 'var_' + re.sub(r'[^A-Za-z0-9_]', '_', x.arg[0]))}", n)),
    (UPat(Ops.SPECIAL, name="x"), lambda ctx, x: ctx.ren.render_special(ctx, x)),
    (UPat(Ops.DEFINE_LOCAL, name="x"), lambda ctx, x: ctx.line(ctx.ren.shared.format(
      type=ctx.ren.memory_types.get(x.dtype.base) or ctx.type(x.dtype.base), name=f"smem{x.arg}", size=x.dtype.size)) or f"smem{x.arg}"),
    (UPat(Ops.BARRIER), lambda ctx: ctx.line(ctx.ren.barrier)),
    (UPat(Ops.RANGE, name="x"), lambda ctx, x: ctx.open(ctx.ren.loop.format(type=ctx.type(x.dtype), name=f"ridx{x.arg[0]}", end=ctx[x.src[0]]), f"ridx{x.arg[0]}")),
    (UPat((Ops.ENDRANGE, Ops.ENDIF)), lambda ctx: ctx.close()),
    (UPat(Ops.DEFINE_ACC, name="x"), lambda ctx, x: ctx.declare(ctx.ren.var, f"acc{x.arg}", x.dtype, ctx[x.src[0]])),
    (UPat(Ops.ASSIGN, name="x"), lambda ctx, x: ctx.line("{} = {};".format(*ctx.args(x))) or ctx[x.src[0]]),
    (UPat(Ops.INDEX, name="x"), lambda ctx, x: "{}[{}]".format(*ctx.args(x))),
    (UPat(Ops.LOAD, name="x"), lambda ctx, x: ctx[x.src[0]]),
    (UPat(Ops.STORE, name="x"), lambda ctx, x: ctx.line("{} = {};".format(*ctx.args(x)))),
    (UPat(Ops.CAST, name="x"), lambda ctx, x: ctx.ren.render_cast(ctx, x)),
    (UPat(Ops.BITCAST, name="x"), lambda ctx, x: ctx.ren.render_bitcast(ctx, x)),
    (UPat(Ops.WHERE, name="x"), lambda ctx, x: "({} ? {} : {})".format(*ctx.args(x))),
    (UPat(GroupOp.Comparison, name="x"), lambda ctx, x: f"({ctx[x.src[0]]} {ctx.ren.infix[x.op]} {ctx[x.src[1]]})"),
    # bool: ADD and MAX are OR, MUL is AND
    (on(Ops.NEG, dtypes.bool), lambda ctx, x: f"(!{ctx[x.src[0]]})"),
    (on(Ops.MULACC, dtypes.bool), lambda ctx, x: "(({} & {}) | {})".format(*ctx.args(x))),
    (on(GroupOp.Binary, dtypes.bool), lambda ctx, x: f"({ctx[x.src[0]]} {ctx.ren.bool_infix[x.op]} {ctx[x.src[1]]})" if x.op in ctx.ren.bool_infix else None),
    # floats: NaN wins a MAX (and of equal values the first); MULACC is the language's fma, rounded once, where declared
    (on(Ops.MAX, FLOATS), lambda ctx, x: "(({0} >= {1} || {0} != {0}) ? {0} : {1})".format(*ctx.args(x))),
    (on(Ops.NEG, FLOATS), lambda ctx, x: f"(-{ctx[x.src[0]]})"),
    (on(Ops.RECIP, FLOATS), lambda ctx, x: f"({ctx.ren.render_const(1.0, x.dtype)} / {ctx[x.src[0]]})"),
    (on(Ops.MULACC, FLOATS), lambda ctx, x: "fma{s}({}, {}, {})".format(*ctx.args(x), s=ctx.ren.float_suffix.get(x.dtype, ""))
     if x.dtype.scalar in ctx.ren.mulacc_dtypes else None),
    (on(Ops.IDIV, FLOATS), lambda ctx, x: "floor{s}({} / {})".format(*ctx.args(x), s=ctx.ren.float_suffix.get(x.dtype, ""))),
    (on((Ops.SQRT, Ops.TRUNC, Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.MOD), FLOATS), lambda ctx, x: f"{ctx.ren.functions[x.op]}{ctx.ren.float_suffix.get(x.dtype, '')}"
     f"({', '.join(ctx.args(x))})" if x.op in ctx.ren.functions else None),
    (on(GroupOp.Binary, FLOATS), lambda ctx, x: f"({ctx[x.src[0]]} {ctx.ren.infix[x.op]} {ctx[x.src[1]]})" if x.op in ctx.ren.infix else None),
    # integers: wrapping (the cast brings promoted 8/16-bit math back), shift counts mod the width, guarded division
    (on(Ops.MAX, INTS), lambda ctx, x: "({0} > {1} ? {0} : {1})".format(*ctx.args(x))),
    (on(Ops.NEG, INTS), lambda ctx, x: f"(({ctx.type(x.dtype)})(-{ctx[x.src[0]]}))"),
    (on(Ops.MULACC, INTS), lambda ctx, x: "(({t})({} * {} + {}))".format(*ctx.args(x), t=ctx.type(x.dtype))),
    (on((Ops.SHL, Ops.SHR), INTS), lambda ctx, x: "(({t})({} {op} ({} & {w})))".format(*ctx.args(x), t=ctx.type(x.dtype),
                                                                                    op="<<" if x.op is Ops.SHL else ">>", w=8 * x.dtype.itemsize - 1)),
    (on((Ops.IDIV, Ops.MOD), INTS), div_guarded),
    (on(GroupOp.Binary, INTS), lambda ctx, x: f"(({ctx.type(x.dtype)})({ctx[x.src[0]]} {ctx.ren.infix[x.op]} {ctx[x.src[1]]}))" if x.op in ctx.ren.infix else None),
  ])
