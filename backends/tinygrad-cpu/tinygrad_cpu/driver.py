"""CPU driver: loads kernels in process (object code through llvmlite's ORC JIT, C shared objects with dlopen) and runs
the core ids of a launch on a thread pool; small kernels run on the calling thread."""
from __future__ import annotations
import _ctypes, ctypes, itertools, os, queue, tempfile, threading, time, weakref
from tinycore.runtime.device import Driver
from tinycore.runtime.plugin import instance_name
from tinycore.runtime.errors import CompileError
from tinygrad_cpu.assembler import unpack, llvm, host_target_machine
from tinygrad_cpu.renderer import cpu_threads

_CTYPES = {"bool": ctypes.c_bool, "char": ctypes.c_int8, "uchar": ctypes.c_uint8, "short": ctypes.c_int16, "ushort": ctypes.c_uint16,
           "int": ctypes.c_int32, "uint": ctypes.c_uint32, "long": ctypes.c_int64, "ulong": ctypes.c_uint64}
JIT_SESSION_KERNELS = 32      # LLVM kernels linked into one JIT session (see CPUDriver._link_object)
PARALLEL_MIN_WORK = 1 << 22   # estimated FLOPs + bytes (~80 us of work) below which a kernel runs on one thread: a pool launch costs ~10-40 us

def _dlclose(handle: int) -> None:
  """Unload a C kernel's shared object (ctypes never does)."""
  if hasattr(_ctypes, "dlclose"): _ctypes.dlclose(handle)
  else: _ctypes.FreeLibrary(handle)

class CPUProgram:
  """A loaded kernel: fn(bufs..., vars..., core_start, core_end)."""
  def __init__(self, driver: CPUDriver, name: str, fn, keep, parallel: bool):
    self.driver, self.name, self.fn, self.keep, self.parallel = driver, name, fn, keep, parallel
  def __call__(self, *bufs, global_size=(1, 1, 1), local_size=None, vals: tuple[int, ...] = (), wait: bool = False):
    st = time.perf_counter() if wait else 0.0
    n = global_size[0] * global_size[1] * global_size[2]
    if self.parallel: self.driver.run(self.fn, tuple([b.addr for b in bufs]) + tuple(vals), n, True)
    else: self.fn(*[b.addr for b in bufs], *vals, 0, n)   # a small kernel: on this thread, every core id
    return time.perf_counter() - st if wait else None

_open_instances: weakref.WeakSet = weakref.WeakSet()   # every CPU instance opened: they share the machine's cores

class _Workers:
  """Threads that each run one slice of a launch's core ids. A slice goes in through the thread's own queue and its end
  comes back through the launch's queue: C-level SimpleQueues, with no Future, lock or condition per slice (a
  ThreadPoolExecutor's submit and result cost ~20 us of Python per launch, as much as a small kernel)."""
  def __init__(self): self.inboxes: list[queue.SimpleQueue] = []
  def at_least(self, n: int) -> list[queue.SimpleQueue]:
    """The inboxes of n threads, started on first need (the driver's thread count can change between launches)."""
    while len(self.inboxes) < n:
      self.inboxes.append(box := queue.SimpleQueue())
      threading.Thread(target=self._serve, args=(box,), name="tinycore-cpu", daemon=True).start()
    return self.inboxes
  def __del__(self):   # the threads hold their inboxes, not this: a dropped pool tells them to end
    for box in self.inboxes: box.put(None)
  @staticmethod
  def _serve(box: queue.SimpleQueue) -> None:
    while (job := box.get()) is not None:
      fn, args, done = job
      try: fn(*args)
      except BaseException as e: done.put(e)   # handed to the launching thread, which raises it
      else: done.put(None)

class CPUDriver(Driver):
  """Kernels run synchronously: a launch returns when every core id has run, so synchronize has nothing to wait for.
  With several instances open (CPU:0, CPU:1, ...: sharded tensors launch a kernel on each at once), each runs its
  launches on its share of the cores."""
  def __init__(self, index: int = 0):
    super().__init__(instance_name("CPU", index))
    self.threads = cpu_threads()
    _open_instances.add(self)
    self._pool: _Workers | None = None
    self._pool_pid = 0
    self._jit = None
    self._libs = itertools.count()
  def load(self, name: str, binary: bytes, spec=None) -> CPUProgram:
    header, payload = unpack(binary)
    argtypes = [ctypes.c_void_p] * header["nbufs"] + [_CTYPES[t] for t in header["vars"]] + [ctypes.c_int32, ctypes.c_int32]
    if header["kind"] == "llvm": addr, keep = self._link_object(name, header["fn"], payload)
    else: addr, keep = self._dlopen(name, header["fn"], payload)
    fn = ctypes.CFUNCTYPE(None, *argtypes)(addr)   # a foreign call releases the GIL: pool threads run in parallel
    return CPUProgram(self, name, fn, keep, self._worth_threads(spec))
  def _link_object(self, name: str, fn: str, obj: bytes):
    # every link leaves ~9 KB in its JIT session (the emptied library) after its code is freed, and a session costs
    # ~170 KB: kernels are linked JIT_SESSION_KERNELS to a session, which each kernel's tracker holds (a session ends
    # with the last of its kernels), so loaded code stays bounded by the loaded runners (KERNEL_CACHE_SIZE)
    if (i := next(self._libs)) % JIT_SESSION_KERNELS == 0: self._jit = llvm().create_lljit_compiler(host_target_machine()[0])
    try:
      tracker = llvm().JITLibraryBuilder().add_object_img(obj).add_current_process().export_symbol(fn).link(self._jit, f"{fn}_{i}")
    except RuntimeError as e: raise CompileError(f"CPU: cannot load kernel {name!r}: the JIT linker refused its object code: {e}") from e
    return tracker[fn], tracker   # the code is freed when the tracker is (an evicted runner's program)
  def _dlopen(self, name: str, fn: str, so: bytes):
    fd, path = tempfile.mkstemp(suffix=".so")
    try:
      with os.fdopen(fd, "wb") as f: f.write(so)
      lib = ctypes.CDLL(path)
      # lib[fn] is not cached on lib (getattr is, in a cycle through lib): lib goes when the program does, and unloads
      addr = ctypes.cast(lib[fn], ctypes.c_void_p).value
      weakref.finalize(lib, _dlclose, lib._handle)
      return addr, lib
    except (OSError, AttributeError) as e: raise CompileError(f"CPU: cannot load kernel {name!r} from its shared object: {e}") from e
    finally: os.unlink(path)
  def _worth_threads(self, spec) -> bool:
    if spec is None: return True
    work = (spec.flops, spec.mem_bytes)
    return not all(isinstance(w, int) for w in work) or sum(work) >= PARALLEL_MIN_WORK
  def run(self, fn, args: tuple, n: int, parallel: bool) -> None:
    """Core ids [0, n) in `workers` contiguous slices; the calling thread runs the first."""
    workers = min(max(1, self.threads // len(_open_instances)), n) if parallel else 1
    if workers <= 1:
      fn(*args, 0, n)
      return
    if self._pool is None or self._pool_pid != os.getpid():  # a forked child inherits the pool object, not its threads
      self._pool, self._pool_pid = _Workers(), os.getpid()
    bounds = [n * i // workers for i in range(workers + 1)]
    done: queue.SimpleQueue = queue.SimpleQueue()   # per launch: launches from several threads never take each other's ends
    inboxes = self._pool.at_least(workers - 1)
    for i in range(1, workers): inboxes[i - 1].put((fn, (*args, bounds[i], bounds[i+1]), done))
    try: fn(*args, bounds[0], bounds[1])
    finally: ends = [done.get() for _ in range(1, workers)]   # every slice has ended before the launch returns or raises
    if errors := [e for e in ends if e is not None]: raise errors[0]
