"""CPU assemblers: LLVM IR -> native object code with llvmlite's bundled LLVM, or C -> a shared object with clang/gcc."""
from __future__ import annotations
import functools, os, shutil, subprocess, tempfile
from tinycore.runtime.device import Assembler
from tinycore.runtime.binary import pack_binary, unpack_binary, disassemble_with
from tinycore.runtime.errors import CompileError
from tinygrad_cpu.renderer import kernel_signature

MAGIC = b"TCCPU1\n"   # tinycore's binary container (runtime/binary.py): header {kind, fn, nbufs, vars}, payload an object file or shared object

def pack(kind: str, src: str, payload: bytes) -> bytes:
  name, nbufs, var_types = kernel_signature(src)
  return pack_binary(MAGIC, {"kind": kind, "fn": name, "nbufs": nbufs, "vars": list(var_types)}, payload)

def unpack(binary: bytes) -> tuple[dict, bytes]:
  """The header and payload of a binary, checked: anything else raises CompileError naming CPU."""
  header, payload = unpack_binary(MAGIC, binary, "CPU")
  if header.get("kind") not in ("llvm", "so"): raise CompileError(f"CPU: corrupt kernel binary (unknown kind {header.get('kind')!r}); it was not produced by this backend's assembler")
  return header, payload

@functools.cache
def llvm():
  import llvmlite.binding as binding
  binding.initialize_native_target()
  binding.initialize_native_asmprinter()
  return binding

@functools.cache
def host_target_machine():
  """The host's triple, CPU name and features; -O3 code generation, position independent, large code model: the JIT
  (RuntimeDyld) maps a kernel's code and its constants separately, and in a long-lived process they can land more than
  2 GiB apart, past what the small model's 32-bit relocations reach (LLVM aborted: "resolveX86_64Relocation: Assertion
  isInt<32>(RealOffset)", a pytest worker killed mid-run)."""
  ll = llvm()
  triple, cpu, feats = ll.get_process_triple(), ll.get_host_cpu_name(), ll.get_host_cpu_features().flatten()
  return ll.Target.from_triple(triple).create_target_machine(cpu=cpu, features=feats, opt=3, reloc="pic", codemodel="large"), f"{triple}:{cpu}:{feats}"

class CPUAssembler(Assembler):
  """What both CPU assemblers share: their output disassembled by LLVM's objdump (LLVM 19's as CI installs it) or binutils'."""
  def disassemble(self, binary: bytes) -> str | None:
    return disassemble_with(("llvm-objdump", "llvm-objdump-19", "objdump"), ("-d", "--no-show-raw-insn"), unpack(binary)[1])

class LLVMAssembler(CPUAssembler):
  """LLVM IR -> object code, in process: verify, the O3 pipeline (no fast-math anywhere), emit an ELF/Mach-O/COFF object."""
  def __init__(self, renderer=None):
    super().__init__(renderer)
    self.tm, host = host_target_machine()
    self.target = f"llvm{'.'.join(map(str, llvm().llvm_version_info))}-O3-nounroll-large:{host}"  # all that decides the bytes
  def assemble(self, src: str) -> bytes:
    ll = llvm()
    try:
      mod = ll.parse_assembly(src)
      mod.verify()
    except RuntimeError as e: raise CompileError(f"CPU: LLVM rejected the IR of kernel {kernel_signature(src)[0]}: {e}") from e
    mod.triple, mod.data_layout = self.tm.triple, str(self.tm.target_data)
    pto = ll.create_pipeline_tuning_options(speed_level=3)
    pto.loop_unrolling = False  # our upcasts unroll where it pays; LLVM's unroller doubled code generation time
    pb = ll.create_pass_builder(self.tm, pto)
    mpm = pb.getModulePassManager()
    # freed here: llvmlite's ModulePassManager never frees itself (its MRO picks ObjectRef's no-op _dispose over
    # NewPassManager's), and the O3 pipeline, ~75 KB of LLVM heap, stayed behind for every kernel ever assembled
    try: mpm.run(mod, pb)
    finally: ll.newpassmanagers.NewPassManager._dispose(mpm); mpm.detach()
    return pack("llvm", src, self.tm.emit_object(mod))

@functools.cache
def _has_float16(cc: str) -> bool:
  """Does `cc` compile _Float16 arithmetic for the host (clang before 15 does not on x86; gcc does from 12)?"""
  with tempfile.TemporaryDirectory() as d:
    with open(os.path.join(d, "t.c"), "w") as f: f.write("_Float16 f(_Float16 a, _Float16 b) { return a * b; }\n")
    try: return subprocess.run([cc, "-c", "-O0", "-march=native", "t.c", "-o", "t.o"], cwd=d, capture_output=True).returncode == 0
    except OSError: return False

@functools.cache
def find_c_compiler() -> str | None:
  """$CC when set; else clang or gcc, the first that supports _Float16 (the float16 type the C renderer uses), else
  the first installed."""
  if (cc := os.environ.get("CC")) and (path := shutil.which(cc)): return path
  found = [path for cc in ("clang", "gcc") if (path := shutil.which(cc))]
  return next((cc for cc in found if _has_float16(cc)), found[0] if found else None)

class ClangAssembler(CPUAssembler):
  """C -> a shared object with clang or gcc. -O2 -march=native; -ffp-contract=off and no fast-math keep IEEE semantics,
  -fwrapv makes signed overflow wrap like every other backend."""
  FLAGS = ["-shared", "-fPIC", "-O2", "-march=native", "-ffp-contract=off", "-fwrapv", "-fno-math-errno", "-fno-ident", "-std=gnu11"]
  def __init__(self, renderer=None):
    super().__init__(renderer)
    self.cc = find_c_compiler()
    version = subprocess.run([self.cc, "--version"], capture_output=True, text=True).stdout.split("\n")[0] if self.cc else "none"
    self.target = f"c:{version}:{' '.join(self.FLAGS)}:{host_target_machine()[1]}"
  def assemble(self, src: str) -> bytes:
    if self.cc is None:
      raise CompileError("CPU: the C renderer (CPU_RENDERER=C) needs a C compiler, but neither clang nor gcc is on PATH; "
                         "install one (or set CC), or use the default LLVM renderer")
    with tempfile.TemporaryDirectory() as d:  # fixed file names in the build: the output depends on the source only
      with open(os.path.join(d, "kernel.c"), "w") as f: f.write(src)
      proc = subprocess.run([self.cc, *self.FLAGS, "-o", "kernel.so", "kernel.c", "-lm"], cwd=d, capture_output=True, text=True)
      if proc.returncode != 0: raise CompileError(f"CPU: {os.path.basename(self.cc)} failed on kernel {kernel_signature(src)[0]}:\n{proc.stderr[-4000:]}")
      with open(os.path.join(d, "kernel.so"), "rb") as f: return pack("so", src, f.read())
