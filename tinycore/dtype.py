"""Data types, their promotion lattice, and conversions to numpy and Python values."""
from __future__ import annotations
import functools, math, struct
from fractions import Fraction
from dataclasses import dataclass, fields
import numpy as np
from tinycore.helpers import DEFAULT_FLOAT, DEFAULT_INT

class _Interned(type):
  """One object per distinct dtype: building a DType equal to a live one returns that one. Every UOp key holds a dtype,
  so hashing and comparing one is on the path of every node built; interned, both are the identity's (no Python call)."""
  def __init__(cls, *a, **kw):
    super().__init__(*a, **kw)
    cls._made: dict[tuple, DType] = {}   # constructor arguments as called -> the dtype (a class of its own: PtrDType's differ)
  def __call__(cls, *args, **kw):
    if (made := cls._made.get(key := (_Interned, args, tuple(kw.items())) if kw else args)) is not None: return made
    new = super().__call__(*args, **kw)
    made = cls._made[key] = _canon.setdefault((cls, tuple(getattr(new, f.name) for f in fields(new))), new)
    return made

_canon: dict[tuple, DType] = {}   # (class, every field) -> the dtype

@dataclass(frozen=True, eq=False)
class DType(metaclass=_Interned):
  priority: int          # promotion order among scalars of the same kind
  itemsize: int          # bytes of one scalar
  name: str
  fmt: str | None        # struct format character, None where struct has none (bfloat16)
  count: int = 1         # vector width: >1 only inside kernels
  # equality and hash are the object's (interned); a copy or a pickle is rebuilt through the constructor, so it is the same object
  def __reduce__(self): return self.__class__, tuple(getattr(self, f.name) for f in fields(self))
  def __copy__(self): return self
  def __deepcopy__(self, memo): return self
  def __repr__(self): return f"dtypes.{self.name}" if self.count == 1 else f"dtypes.{self.name}.vec({self.count})"
  def __lt__(self, o: DType): return (self.priority, self.itemsize, self.name, self.count) < (o.priority, o.itemsize, o.name, o.count)
  @property
  def nbytes(self) -> int: return self.itemsize * self.count
  @property
  def scalar(self) -> DType: return self if self.count == 1 else DTYPES_BY_NAME[self.name]
  def vec(self, n: int) -> DType:
    if self.count != 1: raise ValueError(f"cannot vectorize {self}, it is already a vector")
    return self if n == 1 else DType(self.priority, self.itemsize, self.name, None, n)
  def ptr(self, size: int = -1, addrspace: str = "global") -> PtrDType: return PtrDType(self.priority, self.itemsize, self.name, self.fmt, self.count, self, size, addrspace)
  @property
  def min(self): return dtype_min(self)   # tinygrad's dtypes.int32.min: the smallest value (-inf for floats, False for bool)
  @property
  def max(self): return dtype_max(self)

@dataclass(frozen=True, eq=False)
class PtrDType(DType):
  base: DType = None  # type: ignore[assignment]
  size: int = -1
  addrspace: str = "global"  # "global", "local" (workgroup shared memory) or "reg" (a thread's own scratch)
  def __repr__(self): return f"{self.base!r}.ptr({self.size}, {self.addrspace!r})"

def _d(priority, itemsize, name, fmt): return DType(priority, itemsize, name, fmt)

class _DefaultDtypes(type):
  """dtypes.default_float / default_int live in the Context variables DEFAULT_FLOAT / DEFAULT_INT, so assigning one
  (`dtypes.default_float = dtypes.half`) and `Context(DEFAULT_FLOAT="half")` are the same switch."""
  @property
  def default_float(cls) -> DType: return _default(DEFAULT_FLOAT, is_float=True)
  @default_float.setter
  def default_float(cls, dt: DType | str) -> None: DEFAULT_FLOAT.value = dt
  @property
  def default_int(cls) -> DType: return _default(DEFAULT_INT, is_float=False)
  @default_int.setter
  def default_int(cls, dt: DType | str) -> None: DEFAULT_INT.value = dt

class dtypes(metaclass=_DefaultDtypes):
  """The scalar types a tensor can hold. `dtypes.default_float`/`default_int` pick what Python floats/ints become."""
  bool = _d(0, 1, "bool", "?")
  int8, uint8 = _d(1, 1, "char", "b"), _d(2, 1, "uchar", "B")
  int16, uint16 = _d(3, 2, "short", "h"), _d(4, 2, "ushort", "H")
  int32, uint32 = _d(5, 4, "int", "i"), _d(6, 4, "uint", "I")
  int64, uint64 = _d(7, 8, "long", "q"), _d(8, 8, "ulong", "Q")
  float16, bfloat16 = _d(11, 2, "half", "e"), _d(12, 2, "bfloat16", None)
  float32, float64 = _d(13, 4, "float", "f"), _d(14, 8, "double", "d")
  void = _d(-1, 0, "void", None)
  index = _d(-2, 8, "index", None)  # kernel index arithmetic: lowered to int32 or int64 by codegen
  half, float, double = float16, float32, float64
  char, uchar, short, ushort, int, uint, long, ulong = int8, uint8, int16, uint16, int32, uint32, int64, uint64

  @staticmethod
  def is_float(x: DType) -> bool: return x.scalar in _FLOAT_SET
  @staticmethod
  def is_int(x: DType) -> bool: return x.scalar in _INT_SET
  @staticmethod
  def is_unsigned(x: DType) -> bool: return x.scalar in _UINT_SET
  @staticmethod
  def is_bool(x: DType) -> bool: return x.scalar == dtypes.bool
  @staticmethod
  def from_py(x) -> DType:
    if isinstance(x, (list, tuple)): return max((dtypes.from_py(v) for v in x), default=dtypes.default_float)
    if isinstance(x, bool): return dtypes.bool
    if isinstance(x, int): return dtypes.default_int
    if isinstance(x, float): return dtypes.default_float
    raise TypeError(f"cannot infer a dtype from Python value {x!r} of type {type(x).__name__}")
  @staticmethod
  def min(dt: DType): return dtype_min(dt)
  @staticmethod
  def max(dt: DType): return dtype_max(dt)
  @staticmethod
  def fields() -> dict[str, DType]: return dict(DTYPES_BY_NAME_PUBLIC)

class DTypeSet(frozenset):
  """A renderer's supported dtypes: a frozenset that is also callable, as tinygrad's method `renderer.supported_dtypes()`."""
  def __call__(self) -> DTypeSet: return self

SINTS = (dtypes.int8, dtypes.int16, dtypes.int32, dtypes.int64)
UINTS = (dtypes.uint8, dtypes.uint16, dtypes.uint32, dtypes.uint64)
INTS = SINTS + UINTS
FLOATS = (dtypes.float16, dtypes.bfloat16, dtypes.float32, dtypes.float64)
ALL_DTYPES = (dtypes.bool,) + INTS + FLOATS
# membership by hash: a tuple's `in` calls __eq__ on every element before the match
_FLOAT_SET, _INT_SET, _UINT_SET = frozenset(FLOATS), frozenset(INTS + (dtypes.index,)), frozenset(UINTS)
DTYPES_BY_NAME = {d.name: d for d in ALL_DTYPES + (dtypes.void, dtypes.index)}
DTYPES_BY_NAME_PUBLIC = {k: v for k, v in vars(dtypes).items() if isinstance(v, DType) and not k.startswith("default")}

def _default(var, is_float: bool) -> DType:
  dt = to_dtype(var.value)
  if (dtypes.is_float(dt) if is_float else dtypes.is_int(dt)) is False:
    raise TypeError(f"{var.key}={var.value!r} must name {'a float' if is_float else 'an integer'} dtype")
  return dt

class UnknownDTypeError(AttributeError, TypeError):
  """What is no dtype: an AttributeError, as tinygrad's lookup `dtypes.<name>` raises, and a TypeError, as PyTorch's."""

def to_dtype(x: DType | str) -> DType:
  if isinstance(x, DType): return x
  if isinstance(x, str) and x in DTYPES_BY_NAME_PUBLIC: return DTYPES_BY_NAME_PUBLIC[x]
  raise UnknownDTypeError(f"{x!r} is not a dtype; use one of {sorted(DTYPES_BY_NAME_PUBLIC)}")

# promotion lattice (JAX/tinygrad's, made a true lattice): an edge a -> b means a promotes to b.
# Every pair must have one least upper bound, or the join depends on the order it is taken in. In JAX's and tinygrad's
# lattice int64 and uint64 both sit under float16 and bfloat16, two incomparable types with nothing between them, so
# int64 v uint64 had no least upper bound (picking float16 made (int8 v uint64) v bfloat16 = float32 but
# int8 v (uint64 v bfloat16) = bfloat16). Here uint64 goes straight to float32, the default float (JAX's choice for
# int64 v uint64): int64 v uint64 = float32 and uint64 v float16/bfloat16 = float32, while every other int (int64
# included) still meets a float at that float, as in JAX, tinygrad and PyTorch (int32 v float16 = float16).
_PROMO = {dtypes.bool: (dtypes.int8, dtypes.uint8), dtypes.int8: (dtypes.int16,), dtypes.int16: (dtypes.int32,),
          dtypes.int32: (dtypes.int64,), dtypes.int64: (dtypes.float16, dtypes.bfloat16),
          dtypes.uint8: (dtypes.int16, dtypes.uint16), dtypes.uint16: (dtypes.int32, dtypes.uint32),
          dtypes.uint32: (dtypes.int64, dtypes.uint64), dtypes.uint64: (dtypes.float32,),
          dtypes.float16: (dtypes.float32,), dtypes.bfloat16: (dtypes.float32,), dtypes.float32: (dtypes.float64,)}

@functools.cache
def _upper(dt: DType) -> frozenset[DType]: return frozenset({dt}).union(*(_upper(x) for x in _PROMO.get(dt, ())))

@functools.cache
def _join(common: frozenset[DType]) -> DType:
  """The least element of a set of common upper bounds: the one every other element is above."""
  least = [d for d in common if common <= _upper(d)]
  if len(least) != 1: raise TypeError(f"dtype promotion has no least upper bound among {sorted(common)}")
  return least[0]

def least_upper_dtype(*ds: DType) -> DType:
  """The smallest dtype every argument promotes to in the lattice above (a join: commutative and associative).
  Ints meet floats at the float (uint64 at float32 or above), signed meets unsigned one size up, int64 v uint64 = float32."""
  return _join(frozenset.intersection(*(_upper(d.scalar) for d in ds)))

def least_upper_float(dt: DType) -> DType: return dt if dtypes.is_float(dt) else least_upper_dtype(dt, dtypes.default_float)
def acc_dtype(dt: DType) -> DType:
  """The dtype a float sum is added up in: half floats (float16, bfloat16) in float32, every other as itself."""
  return dtypes.float32 if dt in (dtypes.float16, dtypes.bfloat16) else dt
def sum_acc_dtype(dt: DType) -> DType:
  """The dtype `sum` accumulates and returns in: small ints widen like PyTorch, floats stay."""
  if dtypes.is_unsigned(dt): return least_upper_dtype(dt, dtypes.uint32)
  if dtypes.is_int(dt) or dt == dtypes.bool: return least_upper_dtype(dt, dtypes.int32)
  return dt

_NP = {dtypes.bool: np.bool_, dtypes.int8: np.int8, dtypes.uint8: np.uint8, dtypes.int16: np.int16, dtypes.uint16: np.uint16,
       dtypes.int32: np.int32, dtypes.uint32: np.uint32, dtypes.int64: np.int64, dtypes.uint64: np.uint64,
       dtypes.float16: np.float16, dtypes.float32: np.float32, dtypes.float64: np.float64}
def to_np_dtype(dt: DType):
  """numpy's dtype for `dt`; bfloat16 is stored as its raw uint16 bits."""
  return np.uint16 if dt.scalar == dtypes.bfloat16 else _NP[dt.scalar]
def to_np_value_dtype(dt: DType):
  """numpy's dtype to compute `dt`'s values in: bfloat16's in float32 (numpy has no bfloat16), every other its own."""
  return np.float32 if dt.scalar == dtypes.bfloat16 else _NP[dt.scalar]
def from_np_dtype(npdt) -> DType:
  npdt = np.dtype(npdt)
  for k, v in _NP.items():
    if np.dtype(v) == npdt: return k
  raise TypeError(f"numpy dtype {npdt} has no tinycore equivalent; supported: {[np.dtype(v).name for v in _NP.values()]}")

def dtype_min(dt: DType):
  if dtypes.is_int(dt): return 0 if dtypes.is_unsigned(dt) else -2**(8*dt.itemsize-1)
  return False if dt.scalar == dtypes.bool else -math.inf
def dtype_max(dt: DType):
  if dtypes.is_int(dt): return 2**(8*dt.itemsize)-1 if dtypes.is_unsigned(dt) else 2**(8*dt.itemsize-1)-1
  return True if dt.scalar == dtypes.bool else math.inf

# scalar conversions with the target dtype's exact semantics (wraparound for ints, IEEE rounding for floats)
def f32_to_bf16_bits(x: float) -> int:
  """Round-to-nearest-even conversion of a float to bfloat16 bits (NaN stays NaN)."""
  bits = struct.unpack("<I", struct.pack("<f", x))[0]
  if (bits & 0x7fffffff) > 0x7f800000: return ((bits >> 16) | (0x40 if bits & 0xffff else 0)) & 0xffff   # a bfloat16 NaN keeps its bits
  return ((bits + 0x7fff + ((bits >> 16) & 1)) >> 16) & 0xffff
def bf16_bits_to_f32(b: int) -> float: return struct.unpack("<f", struct.pack("<I", (b & 0xffff) << 16))[0]
def round_to_odd_f32(x) -> np.ndarray:
  """x (float64, float32, integer or bool values) as float32 rounded to odd: toward zero, the last bit set where that
  dropped anything. Rounding these to bfloat16 then rounds x once (through a plain float32, x + a little past a bfloat16
  tie would land on the tie and round again, to even)."""
  x = np.asarray(x)
  if x.dtype.kind in "iu" and x.dtype.itemsize == 8:  # past 2**53 float64 rounds too: to odd first, at bit 11 (53 bits left)
    low = x & x.dtype.type(0x7ff)
    x = np.where(np.abs(x.astype(np.float64)) >= 2.0 ** 53, (x - low) | ((low != 0).astype(x.dtype) << x.dtype.type(11)), x)
  wide = x.astype(np.float64)
  with np.errstate(over="ignore"): f = wide.astype(np.float32)
  back = f.astype(np.float64)
  inexact = (back != wide) & ~np.isnan(wide)
  bits = f.view(np.uint32) - (inexact & (np.abs(back) > np.abs(wide))).astype(np.uint32)   # rounded away from zero: one step back
  return (bits | inexact.astype(np.uint32)).view(np.float32)

# ***** fused multiply-add, rounded once (numpy has none): the semantics of every hardware fma the emulators model *****

def _two_sum(a, b):
  """(s, e) with s = a + b rounded and s + e == a + b exactly (Knuth)."""
  s = a + b
  bb = s - a
  return s, (a - (s - bb)) + (b - bb)

def _round_odd(s, e):
  """s + e (s the nearest float64, e its exact error) rounded to odd: where inexact and s's last bit is even, the
  neighbour of s toward s + e. A second rounding of that to 2 or more fewer bits is the correct rounding of s + e."""
  bits = s.view(np.int64)
  step = np.where(np.isfinite(s) & (e != 0) & (bits & 1 == 0), np.where(np.signbit(e) == np.signbit(s), 1, -1), 0)
  return (bits + step).view(np.float64)

def _fma_exact(a: float, b: float, c: float) -> float:
  """One fma in rational arithmetic (the rare operands the float64 method cannot take)."""
  x = Fraction(a) * Fraction(b) + Fraction(c)
  if x == 0: return a * b + c if a == 0 or b == 0 else 0.0   # an exact zero: IEEE's sign rules
  try: return float(x)   # int / int division, correctly rounded, subnormals included
  except OverflowError: return math.inf if x > 0 else -math.inf

def _fma_f64(a, b, c):
  """a * b as an exact pair (Veltkamp split, Dekker product), its sum with c as exact pairs, the small parts rounded to
  odd, then one rounding (Boldo and Melquiond's emulated fma). Operands where a step could overflow or underflow, or the
  result is tiny, are done exactly one by one; a zero or non-finite operand follows IEEE (a finite product plus an
  infinity is that infinity)."""
  a, b, c = np.broadcast_arrays(*(np.asarray(x, np.float64) for x in (a, b, c)))
  def split(x):
    t = x * 134217729.0   # 2**27 + 1
    hi = t - (t - x)
    return hi, x - hi
  p = a * b
  (ah, al), (bh, bl) = split(a), split(b)
  pe = ((ah * bh - p) + ah * bl + al * bh) + al * bl
  th, tl = _two_sum(c, p)
  out = th + _round_odd(*_two_sum(tl, pe))
  finite = np.isfinite(a) & np.isfinite(b)
  out = np.where(finite & ~np.isfinite(c), c, np.where(finite & (a != 0) & (b != 0), out, p + c))   # p + c: exact there
  hard = finite & np.isfinite(c) & ((np.abs(a) > 2.0 ** 995) | (np.abs(b) > 2.0 ** 995) | (np.abs(p) > 2.0 ** 1000) |
                                    ((np.abs(p) < 2.0 ** -900) & (a != 0) & (b != 0)) | ((np.abs(out) < 2.0 ** -1000) & (p != 0)))
  for i in zip(*np.nonzero(hard)): out[i] = _fma_exact(float(a[i]), float(b[i]), float(c[i]))
  return out

def fma_odd(a, b, c):
  """a * b + c in float64 rounded to odd, for operands of at most 26 significant bits (float16, bfloat16, float32): their
  product is exact in float64, so one more rounding to 24 or fewer bits is the correctly rounded fma."""
  with np.errstate(all="ignore"):
    f = lambda x: np.asarray(x, np.float64)
    return _round_odd(*_two_sum(f(a) * f(b), f(c)))

def fma(a, b, c):
  """a * b + c rounded once (IEEE fusedMultiplyAdd) in the dtype of a: float16 and float32 by fma_odd, then one rounding
  to the narrow type; float64 by _fma_f64."""
  dt = np.asarray(a).dtype
  if dt == np.float64:
    with np.errstate(all="ignore"): return _fma_f64(a, b, c)
  if dt not in (np.float16, np.float32): raise TypeError(f"fma of {dt}: only float16, float32 and float64")
  with np.errstate(all="ignore"): return fma_odd(a, b, c).astype(dt)

def tensor_core_dot(A, B, C, emin: int, frac_bits: int, rounding: str, nan_bits: int | None = None):
  """D = A B + C as a tensor core computes it: A (..., M, K) and B (..., K, N) hold the inputs' exact values (float64),
  emin the input format's smallest normal exponent; C (..., M, N) float32. The products are exact (inputs of at most
  11 significant bits: f16, bf16, tf32). The K products and c are added at once, aligned as the hardware's adder sees
  them: a term's exponent comes from exponent fields (a product's is the sum of its operands', its significand in
  [1, 4) not normalised; a subnormal has the smallest normal exponent), every term is cut toward zero to a multiple of
  2**(E - frac_bits), E the largest of those exponents, the cut terms are added exactly and the sum is rounded to
  float32 (rz: toward zero, rn: to nearest even). Infinities propagate as in IEEE arithmetic; a NaN result is nan_bits
  when given. frac_bits <= 46 keeps every step exact in float64."""
  with np.errstate(all="ignore"):
    def expo(x, lo):   # the exponent field's value: floor(log2|x|), lo for subnormals, very small for zero
      return np.where(x == 0, -9999, np.maximum(np.frexp(x)[1] - 1, lo))
    C = np.asarray(C, np.float64)
    prods = A[..., :, :, None] * B[..., None, :, :]   # (..., M, K, N)
    e_prod = np.where(prods == 0, -9999, expo(A, emin)[..., :, :, None] + expo(B, emin)[..., None, :, :])
    q = np.maximum(e_prod.max(axis=-2), expo(C, -126)) - frac_bits   # (..., M, N): the weight of the last bit kept
    cut = lambda x, q: np.trunc(np.ldexp(np.where(np.isfinite(x), x, 0.0), -q))
    v = np.ldexp(cut(prods, q[..., None, :]).sum(axis=-2) + cut(C, q), q)
    r = v.astype(np.float32)
    if rounding == "rz": r = np.where(np.abs(r.astype(np.float64)) > np.abs(v), np.nextafter(r, np.float32(0)), r)
    special = prods.sum(axis=-2) + C   # where any term is not finite: IEEE's infinities and NaN
    r = np.where(np.isfinite(special), r, special.astype(np.float32))
    if nan_bits is not None: r = np.where(np.isnan(r), np.array(nan_bits, np.uint32).view(np.float32), r)
    return r

_ROUNDTRIP = {"f": (_F32 := struct.Struct("<f")), "e": struct.Struct("<e")}

def truncate(dt: DType, x):
  """Convert a Python value to what `dt` holds exactly: the semantics constant folding must match."""
  if dt is dtypes.float32 and x.__class__ is float:   # the common case (every float constant of a model), before the general path
    try: return _F32.unpack(_F32.pack(x))[0]
    except OverflowError: pass
  dt = dt.scalar
  if dt == dtypes.bool: return bool(x)
  if dtypes.is_int(dt):
    if dt == dtypes.index: return int(x)
    if isinstance(x, float):
      if not math.isfinite(x): return 0
      x = int(x)
    x = int(x) & ((1 << (8*dt.itemsize)) - 1)
    return x - (1 << (8*dt.itemsize)) if not dtypes.is_unsigned(dt) and x >= 1 << (8*dt.itemsize-1) else x
  if x.__class__ is int and dt != dtypes.float64 and abs(x) > 2**53:   # float(x) rounds: to odd (53 bits), so x rounds once below
    s = abs(x).bit_length() - 53
    x = ((x >> s) | int((x & ((1 << s) - 1)) != 0)) << s
  x = float(x)
  if dt == dtypes.float64: return x
  if (rt := _ROUNDTRIP.get(dt.fmt)) is not None:  # struct rounds to nearest even like numpy, without an errstate block
    try: return rt.unpack(rt.pack(x))[0]
    except OverflowError: pass  # past the dtype's largest finite value: numpy's conversion below gives inf
  if dt == dtypes.bfloat16: return bf16_bits_to_f32(f32_to_bf16_bits(float(round_to_odd_f32(x))))
  with np.errstate(over="ignore"): return float(to_np_dtype(dt)(x))
