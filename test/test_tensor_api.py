"""tinygrad's API as ported programs use it: argument forms, helpers, Context variables, the training switch, module paths,
symbolic slicing and error types; numbers checked against numpy (and PyTorch where installed)."""
import gzip, importlib, inspect, io, pathlib, re, tarfile, zipfile
import numpy as np
import pytest
from tinycore import Tensor, Variable, TinyJit, Context, dtypes, nn
from tinycore import engine
from tinycore.helpers import all_same, partition, unwrap, get_child, Timing, Profiling, tqdm, trange, fetch, colored

# ***** argument forms *****

def test_reshape_none_keeps_a_dim_and_minus_one_infers():
  a = Tensor.arange(24).reshape(2, 3, 4)
  assert a.reshape(None, -1).shape == (2, 12)
  assert a.reshape((None, 4, 3)).shape == (2, 4, 3)
  np.testing.assert_equal(a.reshape(None, 12).numpy(), np.arange(24).reshape(2, 12))

def test_cat_and_stack_take_a_list_like_torch():
  a, b = Tensor([1, 2]), Tensor([3, 4])
  np.testing.assert_equal(Tensor.cat([a, b]).numpy(), [1, 2, 3, 4])
  np.testing.assert_equal(Tensor.stack([a, b], dim=1).numpy(), [[1, 3], [2, 4]])
  np.testing.assert_equal(Tensor.stack(a).numpy(), [[1, 2]])

def test_squeeze_a_tuple_of_dims():
  x = Tensor.ones(1, 2, 1, 3)
  assert x.squeeze((0, 2)).shape == (2, 3)
  assert x.squeeze((0, 1)).shape == (2, 1, 3)  # a named dim that is not 1 stays, like torch
  with pytest.raises(IndexError): x.squeeze((0, 7))

def test_error_types_match_tinygrad():
  with pytest.raises(IndexError): Tensor.ones(2, 3).sum(5)
  x = Tensor([1.0, 2.0], requires_grad=True)
  with pytest.raises(RuntimeError, match="only float"): (x > 0).sum().backward()
  with pytest.raises(RuntimeError, match="only float"): x.argmax().gradient(x)

# ***** helpers and Context *****

def test_small_helpers():
  assert all_same([2, 2, 2]) and all_same([]) and not all_same([1, 2])
  assert partition([1, 2, 3, 4, 5], lambda x: x % 2) == ([1, 3, 5], [2, 4])
  assert unwrap(3) == 3
  with pytest.raises(ValueError): unwrap(None)
  model = type("M", (), {})()
  model.layers = [{"w": 1}, {"w": nn.Linear(2, 3)}]
  assert get_child(model, "layers.1.w.weight").shape == (3, 2)
  assert get_child(model, "layers.0.w") == 1

def test_timing_profiling_and_progress_bars(capsys):
  with Timing("step "): pass
  assert capsys.readouterr().out.startswith("step ")
  with Timing("quiet", enabled=False): pass
  assert capsys.readouterr().out == ""
  with Profiling(frac=0.5): sum(range(100))
  assert "function calls" in capsys.readouterr().out
  assert list(tqdm([1, 2, 3], desc="d")) == [1, 2, 3]
  bar = trange(4)
  assert list(bar) == [0, 1, 2, 3] and bar.n == 4
  with tqdm(total=10, disable=True) as t: t.update(3)
  assert t.n == 3

def test_fetch_reads_local_paths_and_the_cache_and_says_what_to_do_offline(tmp_path, monkeypatch):
  f = tmp_path / "data.bin"
  f.write_bytes(b"\x01\x02")
  assert fetch(str(f)) == f
  monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
  cached = fetch("file://" + str(f), name="copy.bin")  # a download (file:// needs no network) lands in the cache
  assert cached.read_bytes() == b"\x01\x02" and "downloads" in str(cached)
  np.testing.assert_equal(Tensor.from_url("file://" + str(f)).numpy(), [1, 2])
  with pytest.raises(OSError, match="offline"): fetch("file://" + str(tmp_path / "missing.bin"))

def test_fetch_checks_sha256_sends_headers_and_extracts_tar(tmp_path, monkeypatch):
  import hashlib, io, tarfile
  monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
  f = tmp_path / "a.tar"
  with tarfile.open(f, "w") as tar:
    info = tarfile.TarInfo("dir/x.txt")
    info.size = 5
    tar.addfile(info, io.BytesIO(b"hello"))
  digest = hashlib.sha256(f.read_bytes()).hexdigest()
  out = fetch("file://" + str(f), sha256=digest, extract=True)
  assert out.is_dir() and (out / "dir" / "x.txt").read_bytes() == b"hello"
  with pytest.raises(RuntimeError, match="sha256"): fetch("file://" + str(f), name="other", sha256="0" * 64)
  assert fetch("file://" + str(f), headers={"X-A": "1"}) != fetch("file://" + str(f))   # cached apart: another request

def test_tensor_from_a_path_is_its_bytes(tmp_path):
  f = tmp_path / "x.bin"
  f.write_bytes(np.array([1.5, -2.0], np.float32).tobytes())
  np.testing.assert_equal(Tensor(f, dtype=dtypes.float32).numpy(), [1.5, -2.0])

def test_context_default_float_is_dtypes_default_float():
  assert dtypes.default_float == dtypes.float32
  with Context(DEFAULT_FLOAT="half"):
    assert dtypes.default_float == dtypes.float16
    assert Tensor([1.5]).dtype == dtypes.float16 and Tensor.ones(2).dtype == dtypes.float16
  assert Tensor([1.5]).dtype == dtypes.float32
  old = dtypes.default_float
  try:
    dtypes.default_float = dtypes.float64
    assert Tensor.rand(2).dtype == dtypes.float64
  finally: dtypes.default_float = old
  with Context(DEFAULT_FLOAT="int32"), pytest.raises(TypeError, match="float"): dtypes.default_float

def test_context_jit_zero_runs_the_function_every_call():
  calls = []
  @TinyJit
  def f(x):
    calls.append(1)
    return (x * 2).realize()
  with Context(JIT=0):
    for i in range(4): np.testing.assert_equal(f(Tensor([float(i)])).numpy(), [2.0 * i])
  assert len(calls) == 4
  with pytest.raises(KeyError, match="unknown Context"): Context(NOT_A_VARIABLE=1).__enter__()

# ***** one training switch *****

def _batchnorm_run(switch):
  Tensor.manual_seed(0)
  bn = nn.BatchNorm(3)
  x = Tensor(np.random.default_rng(0).standard_normal((8, 3, 2, 2)).astype(np.float32) * 3 + 1)
  with switch(): out = bn(x).numpy()
  return out, bn.running_mean.numpy(), bn.running_var.numpy()

@pytest.mark.parametrize("switch", [lambda: Context(TRAINING=1), Tensor.train], ids=["Context(TRAINING=1)", "Tensor.train()"])
def test_batchnorm_follows_every_spelling_of_training_mode(switch):
  out, rm, rv = _batchnorm_run(switch)
  xs = np.random.default_rng(0).standard_normal((8, 3, 2, 2)).astype(np.float32) * 3 + 1
  mean, var = xs.mean((0, 2, 3)), xs.var((0, 2, 3))
  np.testing.assert_allclose(out, (xs - mean[None, :, None, None]) / np.sqrt(var[None, :, None, None] + 1e-5), rtol=1e-4, atol=1e-5)
  np.testing.assert_allclose(rm, 0.1 * mean, rtol=1e-5)  # running stats updated from the batch
  np.testing.assert_allclose(rv, 0.9 + 0.1 * xs.var((0, 2, 3), ddof=1), rtol=1e-5)
  assert Tensor.training is False

def test_tensor_training_and_context_are_one_variable():
  with Context(TRAINING=1): assert Tensor.training is True
  with Tensor.train(): assert Context(TRAINING=0) and Tensor.training is True
  Tensor.training = True
  try:
    out, rm, _ = _batchnorm_run(lambda: Context())
    assert np.abs(rm).sum() > 0  # the assignment form trains too
  finally: Tensor.training = False

# ***** parameters *****

def test_equal_leaves_that_require_grad_get_their_own_gradients():
  # two Tensor.zeros(3) are one hash-consed node; made to require grad, each is a leaf of its own
  a, b = Tensor.zeros(3, requires_grad=True), Tensor.zeros(3, requires_grad=True)
  (a * 2 + b * 3).sum().backward()
  np.testing.assert_equal(a.grad.numpy(), [2, 2, 2])
  np.testing.assert_equal(b.grad.numpy(), [3, 3, 3])
  ln1, ln2 = nn.LayerNorm(2), nn.LayerNorm(2)
  ln2(ln1(Tensor([[1.0, 3.0]])) * 5).sum().backward()
  np.testing.assert_allclose(ln1.bias.grad.numpy(), [0, 0], atol=1e-5)  # LayerNorm's output ignores a shift of its input
  np.testing.assert_allclose(ln2.bias.grad.numpy(), [1, 1])

def test_is_param_and_layer_weights_get_grads_without_an_optimizer():
  lin = nn.Linear(3, 2)
  assert lin.weight.is_param and lin.bias.is_param
  bn = nn.BatchNorm(2)
  assert not bn.running_mean.is_param
  x = Tensor([[1.0, 2.0, 3.0]])
  lin(x).sum().backward()
  np.testing.assert_allclose(lin.weight.grad.numpy(), [[1, 2, 3], [1, 2, 3]])
  np.testing.assert_allclose(lin.bias.grad.numpy(), [1, 1])
  t = Tensor([1.0, 2.0]).is_param_(False)
  assert t.is_param is False and t.requires_grad is False

# ***** module paths *****

def test_tinygrad_module_paths():
  from tinycore.engine.jit import TinyJit as J
  from tinycore.device import Device
  from tinycore.function import function
  assert J is TinyJit and Device.DEFAULT
  @function
  def f(x): return x * 2
  np.testing.assert_equal(f(Tensor([1.0])).numpy(), [2.0])
  assert function(precompile=True)(f) is f

def test_safe_save_load_metadata_and_archives(tmp_path):
  from tinycore.nn.state import safe_save, safe_load, safe_load_metadata, tar_extract, zip_extract
  fn = str(tmp_path / "m.safetensors")
  safe_save({"w": Tensor([[1.0, 2.0]]), "i": Tensor([3], dtype=dtypes.int32)}, fn, metadata={"step": "3"})
  sd = safe_load(fn)
  np.testing.assert_equal(sd["w"].numpy(), [[1.0, 2.0]])
  t, start, meta = safe_load_metadata(fn)
  assert t.dtype == dtypes.uint8 and meta["__metadata__"] == {"step": "3"} and meta["i"]["shape"] == [1]
  assert start == 8 + int.from_bytes(bytes(t[:8].numpy()), "little")
  np.testing.assert_equal(safe_load(t)["i"].numpy(), [3])
  buf = io.BytesIO()
  with tarfile.open(fileobj=buf, mode="w") as tar:
    info = tarfile.TarInfo("a/b.bin"); info.size = 3
    tar.addfile(info, io.BytesIO(b"xyz"))
  (tmp_path / "t.tar").write_bytes(buf.getvalue())
  assert bytes(tar_extract(str(tmp_path / "t.tar"))["a/b.bin"].numpy()) == b"xyz"
  with zipfile.ZipFile(tmp_path / "z.zip", "w", compression=zipfile.ZIP_DEFLATED) as z: z.writestr("f.txt", "hello" * 10)
  assert bytes(zip_extract(tmp_path / "z.zip")["f.txt"].numpy()) == b"hello" * 10

def _idx(arr: np.ndarray) -> bytes:
  return gzip.compress(bytes([0, 0, 0x08, arr.ndim]) + b"".join(int(d).to_bytes(4, "big") for d in arr.shape) + arr.tobytes())

def test_datasets_mnist_and_cifar_from_a_path(tmp_path):
  from tinycore.nn.datasets import mnist, cifar
  from tinycore.datasets import DatasetUnavailable
  rng = np.random.default_rng(0)
  imgs, labels = rng.integers(0, 256, (5, 28, 28), dtype=np.uint8), rng.integers(0, 10, 5, dtype=np.uint8)
  for name, a in zip(["train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz", "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"],
                     [imgs, labels, imgs[:2], labels[:2]]):
    (tmp_path / name).write_bytes(_idx(a))
  X, Y, Xt, Yt = mnist(path=tmp_path)
  assert X.shape == (5, 1, 28, 28) and X.dtype == dtypes.uint8 and Y.dtype == dtypes.uint8 and Xt.shape == (2, 1, 28, 28)
  np.testing.assert_equal(X.numpy()[:, 0], imgs)
  np.testing.assert_equal(Yt.numpy(), labels[:2])
  with pytest.raises(DatasetUnavailable, match="missing"): mnist(path=tmp_path / "nowhere")
  rows = rng.integers(0, 256, (4, 3073), dtype=np.uint8)
  buf = io.BytesIO()
  with tarfile.open(fileobj=buf, mode="w:gz") as tar:
    for name in [f"data_batch_{i}.bin" for i in range(1, 6)] + ["test_batch.bin"]:
      info = tarfile.TarInfo(f"cifar-10-batches-bin/{name}"); info.size = rows.nbytes
      tar.addfile(info, io.BytesIO(rows.tobytes()))
  (tmp_path / "c.tar.gz").write_bytes(buf.getvalue())
  X, Y, Xt, Yt = cifar(path=tmp_path / "c.tar.gz")
  assert X.shape == (20, 3, 32, 32) and Y.shape == (20,) and Xt.shape == (4, 3, 32, 32) and X.dtype == dtypes.uint8
  np.testing.assert_equal(Yt.numpy(), rows[:, 0])
  np.testing.assert_equal(Xt.numpy().reshape(4, -1), rows[:, 1:])
  with pytest.raises(DatasetUnavailable, match="missing"): cifar(path=tmp_path / "none.tar.gz")

# ***** symbolic indexing *****

def test_kv_cache_slicing_with_a_bound_variable_compiles_once():
  max_len, dim = 10, 4
  cache = Tensor.zeros(max_len, dim).contiguous().realize()
  ref = np.zeros((max_len, dim), np.float32)
  @TinyJit
  def step(x, start_pos):
    cache[start_pos:start_pos + 1].assign(x).realize()
    return (cache[:start_pos + 1] * x).sum(1).softmax(0).realize()
  pos_var = Variable("start_pos", 0, max_len - 1)
  rng = np.random.default_rng(0)
  for pos in range(max_len):
    xv = rng.random((1, dim), dtype=np.float32)
    out = step(Tensor(xv), pos_var.bind(pos))
    ref[pos] = xv
    s = (ref[:pos + 1] * xv).sum(1)
    np.testing.assert_allclose(out.numpy(), np.exp(s - s.max()) / np.exp(s - s.max()).sum(), rtol=1e-5)
    if pos == 2: kernels = engine.stats["loaded"]  # compiled by the first calls; the rest replay them
  assert engine.stats["loaded"] == kernels, "a new position compiled a new kernel"

def test_slicing_a_symbolic_dimension_and_out_of_range_slices():
  v = Variable("n", 2, 8).bind(5)
  x = Tensor(np.arange(32, dtype=np.float32).reshape(8, 4))[:v]
  np.testing.assert_equal(x[1:].numpy(), np.arange(32).reshape(8, 4)[1:5])
  np.testing.assert_equal(x[:, 1:3].numpy(), np.arange(32).reshape(8, 4)[:5, 1:3])
  np.testing.assert_equal(x[:-1].numpy(), np.arange(32).reshape(8, 4)[:4])
  np.testing.assert_equal(x[-1].numpy(), [16, 17, 18, 19])
  np.testing.assert_equal(x[1].numpy(), [4, 5, 6, 7])
  with pytest.raises(IndexError, match="out of bounds"): x[2]  # n may be 2
  with pytest.raises(IndexError, match="may leave"): Tensor.ones(4, 2)[:v]
  with pytest.raises(IndexError, match="step 1"): x[::2]

# ***** layers and optimizers programs import *****

def test_lstmcell_matches_torch():
  torch = pytest.importorskip("torch")
  cell, ref = nn.LSTMCell(3, 4), torch.nn.LSTMCell(3, 4)
  with torch.no_grad():
    for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"): getattr(ref, name).copy_(torch.tensor(getattr(cell, name).numpy()))
  x = np.random.default_rng(0).standard_normal((2, 3)).astype(np.float32)
  h, c = cell(Tensor(x))
  h, c = cell(Tensor(x), (h, c))
  rh, rc = ref(torch.tensor(x))
  rh, rc = ref(torch.tensor(x), (rh, rc))
  np.testing.assert_allclose(h.numpy(), rh.detach().numpy(), rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(c.numpy(), rc.detach().numpy(), rtol=1e-5, atol=1e-6)
  rh.sum().backward()
  gw, = h.sum().gradient(cell.weight_ih)
  np.testing.assert_allclose(gw.numpy(), ref.weight_ih.grad.numpy(), rtol=1e-4, atol=1e-6)

def _one_step(opt_cls, w0: np.ndarray, g: np.ndarray, **kw) -> np.ndarray:
  w = Tensor(w0.copy(), requires_grad=True)
  opt = opt_cls([w], **kw)
  (w * Tensor(g)).sum().backward()
  opt.step()
  return w.numpy()

def test_lars_step_matches_its_formula():
  rng = np.random.default_rng(0)
  w0, g = rng.standard_normal((3, 4)).astype(np.float32), rng.standard_normal((3, 4)).astype(np.float32)
  lr, wd, tc = 0.1, 1e-2, 0.01
  trust = tc * np.linalg.norm(w0) / (np.linalg.norm(g) + wd * np.linalg.norm(w0))
  want = w0 - lr * (g * trust + wd * w0)  # first step: the momentum buffer is the (lr-scaled, classic) gradient
  np.testing.assert_allclose(_one_step(nn.optim.LARS, w0, g, lr=lr, weight_decay=wd, tcoef=tc), want, rtol=1e-5)

def test_muon_step_is_an_orthogonalized_momentum_step():
  rng = np.random.default_rng(1)
  w0, g = rng.standard_normal((4, 6)).astype(np.float32), rng.standard_normal((4, 6)).astype(np.float32)
  x = (g + 0.95 * g).astype(np.float64)  # nesterov: g + momentum * (momentum buffer = g)
  x = x / (np.linalg.norm(x) + 1e-7)
  for _ in range(5):
    xxt = x @ x.T
    x = 3.4445 * x + (-4.775 * xxt + 2.0315 * xxt @ xxt) @ x
  lr, wd = 0.02, 0.1
  np.testing.assert_allclose(_one_step(nn.optim.Muon, w0, g, lr=lr, weight_decay=wd), w0 - lr * (x + wd * w0), rtol=1e-4, atol=1e-6)
  s = np.linalg.svd(x, compute_uv=False)
  assert 0.5 < s.min() and s.max() < 1.5  # the step is near-orthogonal: its singular values sit around 1

def test_newton_schulz_matches_its_polynomial_and_handles_tall_matrices():
  rng, eps = np.random.default_rng(2), 1e-3
  for shape in [(3, 5), (5, 3), (2, 3, 4)]:
    a = rng.standard_normal(shape)
    def ref(m):
      if m.shape[-2] > m.shape[-1]: return np.swapaxes(ref(np.swapaxes(m, -1, -2)), -1, -2)
      g = m / (np.sqrt((m * m).sum((-2, -1), keepdims=True)) + eps)
      for _ in range(4):
        ggt = g @ np.swapaxes(g, -1, -2)
        g = 2 * g - 1.5 * ggt @ g + 0.5 * ggt @ ggt @ g
      return g
    np.testing.assert_allclose(Tensor(a.astype(np.float32)).newton_schulz(4, (2, -1.5, 0.5), eps=eps).numpy(), ref(a), rtol=1e-4, atol=1e-5)

# ***** the API table in docs/ stays true *****

def test_api_table_in_docs_matches_tensor():
  rows = [line.split("|") for line in (pathlib.Path(__file__).resolve().parents[1] / "docs" / "tensor-api.md").read_text().splitlines()
          if line.startswith("| `") and line.split("|")[2].strip() in ("yes", "no")]
  assert len(rows) > 200
  wrong = [r[1].strip() for r in rows if hasattr(Tensor, r[1].strip().strip("`")) != (r[2].strip() == "yes")]
  assert not wrong, f"docs/tensor-api.md says the opposite of Tensor for {wrong}"

# ***** every name tinygrad master's modules define: in docs/tensor-api.md's table, and in tinycore where it says yes *****
# the public names of tinygrad master (2026-08-22): module-level definitions of each file (and tinygrad/__init__.py's imports),
# and the keys its Context accepts
TINYGRAD_MODULE_NAMES = {
  "tinygrad": """Context Device GlobalCounters Tensor TinyJit UOp Variable dtypes fetch function getenv""".split(),
  "tinygrad.helpers": """ALL2ALL ALLOW_DEVICE_USAGE ALLOW_TF32 ALLREDUCE_CAST BASEDIR BEAM CACHEDB CACHELEVEL CAPTURE_PROCESS_REPLAY CAPTURING CCACHE
    CHECK_OOB CHUNK_SIZE Context ContextVar DEBUG DEBUG_RANGEIFY DEFAULT_FLOAT DEFAULT_INT DEV DISABLE_FAST_IDIV DISALLOW_BROADCAST
    EMULATED_DTYPES FLOAT16 FUSE_OPTIM GlobalCounters IGNORE_BEAM_CACHE IMAGE JIT JIT_BATCH_SIZE LRU MAX_BUFFER_SIZE
    MAX_KERNEL_BUFFERS Metadata NOLOCALS NOOPT NO_COLOR NO_MEMORY_PLANNER NULL_ALLOW_COPYOUT NUM_CPU_THREADS OPENPILOT_HACKS OSX
    PARALLEL PCONTIG PROFILE ProfileEvent ProfilePointEvent ProfileRangeEvent Profiling RING SCACHE SPEC SPLIT_REDUCEOP START_TIME T
    TC_OPT TC_SELECT TRACEMETA TRAINING TRANSCENDENTAL TUPLE_ORDER Target Timing TracingKey U USE_ATOMICS USE_TC VALIDATE_WITH_CPU
    VERSION VIZ WIN WINO all_int all_same amdgpu_disassemble ansilen ansipad ansistrip argfix argsort cache_dir canonicalize_strides
    capstone_flatdump cdiv ceildiv cmod colored colorize_float count cpu_events cpu_objdump cpu_profile data64 data64_le
    db_connection dedup disable_gc diskcache diskcache_clear diskcache_get diskcache_put fetch fetch_fw flat_mv flat_to_grouped
    flatten floordiv floormod from_mv fromimport fully_flatten get_child get_shape get_single_element get_stacktrace getbits getenv
    hi32 i2u is_image_shape lines lo32 make_tuple merge_dicts mv_address next_power2 pad_bytes panic partition perf_counter_us
    pluralize polyN printable prod profile_marker resolve_pool_pads round_down round_up select_by_name select_first_inited
    size_to_str stderr_log strides_for_shape strip_parens suppress_finalizing system temp time_to_str to_be32 to_be64 to_char_p_p
    to_function_name to_mv to_tuple tqdm trange unwrap wait_cond word_wrap""".split(),
  "tinygrad.nn": """BatchNorm BatchNorm2d BatchNorm3d Conv1d Conv2d ConvTranspose1d ConvTranspose2d Embedding GroupNorm InstanceNorm LSTMCell
    LayerNorm LayerNorm2d Linear RMSNorm""".split(),
  "tinygrad.nn.state": """TensorIO accept_filename fs_load fs_store get_parameters get_state_dict inverse_safe_dtypes load_state_dict safe_dtypes
    safe_load safe_load_metadata safe_save tar_extract torch_load zip_extract""".split(),
  "tinygrad.nn.optim": """Adam AdamW LAMB LARS Muon Optimizer OptimizerGroup SGD""".split(),
  "tinygrad.device": """ALL_DEVICES Allocator Buffer BufferSpec CompileError Compiled Compiler DepsTracker Device DeviceType LRUAllocator MultiBuffer
    ProfileDeviceEvent ProfileGraphEntry ProfileGraphEvent ProfileProgramEvent Program TinyELF canonicalize_device
    enumerate_devices_str""".split(),
  "tinygrad.renderer": """Estimates Renderer""".split(),
}
TINYGRAD_CONTEXT_VARIABLES = """ALL2ALL ALLOW_DEVICE_USAGE ALLOW_TF32 ALLREDUCE_CAST BEAM CACHELEVEL CAPTURE_PROCESS_REPLAY CAPTURING CCACHE CHECK_OOB DEBUG
  DEBUG_RANGEIFY DEFAULT_FLOAT DEFAULT_INT DEV DISABLE_FAST_IDIV DISALLOW_BROADCAST EMULATED_DTYPES FLOAT16 FUSE_OPTIM
  IGNORE_BEAM_CACHE IMAGE JIT JIT_BATCH_SIZE LRU MAX_BUFFER_SIZE MAX_KERNEL_BUFFERS NOLOCALS NOOPT NO_COLOR NO_MEMORY_PLANNER
  NULL_ALLOW_COPYOUT NUM_CPU_THREADS OPENPILOT_HACKS PARALLEL PCONTIG PROFILE REWRITE_STACK_LIMIT RING SCACHE SPEC SPLIT_REDUCEOP
  TC TC_OPT TC_SELECT TRACEMETA TRACK_MATCH_STATS TRAINING TRANSCENDENTAL TUPLE_ORDER USE_ATOMICS VALIDATE_WITH_CPU VIZ WINO""".split()
# tinygrad's parameters of each name the table marks yes that is a function or class ("..." a default that is no literal)
TINYGRAD_CALL_SHAPES = {
  "tinygrad.Context": "**kwargs", "tinygrad.GlobalCounters": "", "tinygrad.Tensor": "data, device=None, dtype=None",
  "tinygrad.TinyJit": "fxn=None, **kwargs", "tinygrad.UOp": "op, dtype=None, src=(), arg=None, tag=None, metadata=None, _buffer=None",
  "tinygrad.Variable": "name, min_val, max_val, dtype=..., multiple_of=1, param=False",
  "tinygrad.fetch": "url, name=None, subdir=None, gunzip=False, allow_caching=True, headers=..., sha256=None, extract=False",
  "tinygrad.function": "fxn=None, *, precompile=False, precompile_backward=False, allow_implicit=False, grad_fxn=None",
  "tinygrad.helpers.Context": "**kwargs", "tinygrad.helpers.ContextVar": "key, default_value", "tinygrad.helpers.GlobalCounters": "",
  "tinygrad.helpers.Profiling": "enabled=True, sort='cumtime', frac=0.2, fn=None, ts=1",
  "tinygrad.helpers.Target": "device='', renderer='', arch='', interface='', indices=''",
  "tinygrad.helpers.Timing": "prefix='', on_exit=None, enabled=True", "tinygrad.helpers.all_int": "t",
  "tinygrad.helpers.all_same": "items", "tinygrad.helpers.ansilen": "s", "tinygrad.helpers.ansipad": "s, w",
  "tinygrad.helpers.ansistrip": "s", "tinygrad.helpers.argfix": "*x", "tinygrad.helpers.argsort": "x", "tinygrad.helpers.cdiv": "x, y",
  "tinygrad.helpers.ceildiv": "num, amt", "tinygrad.helpers.cmod": "x, y", "tinygrad.helpers.colored": "st, color, background=False",
  "tinygrad.helpers.colorize_float": "x", "tinygrad.helpers.dedup": "x", "tinygrad.helpers.disable_gc": "",
  "tinygrad.helpers.fetch": "url, name=None, subdir=None, gunzip=False, allow_caching=True, headers=..., sha256=None, extract=False",
  "tinygrad.helpers.flatten": "l", "tinygrad.helpers.floordiv": "x, y", "tinygrad.helpers.floormod": "x, y",
  "tinygrad.helpers.fully_flatten": "l", "tinygrad.helpers.get_child": "obj, key", "tinygrad.helpers.get_shape": "x",
  "tinygrad.helpers.get_single_element": "x", "tinygrad.helpers.getbits": "value, start, end", "tinygrad.helpers.make_tuple": "x, cnt",
  "tinygrad.helpers.merge_dicts": "ds", "tinygrad.helpers.next_power2": "x", "tinygrad.helpers.partition": "itr, fxn",
  "tinygrad.helpers.pluralize": "st, cnt", "tinygrad.helpers.polyN": "x, p", "tinygrad.helpers.prod": "x",
  "tinygrad.helpers.round_down": "num, amt", "tinygrad.helpers.round_up": "num, amt", "tinygrad.helpers.size_to_str": "s",
  "tinygrad.helpers.temp": "x, append_user=False", "tinygrad.helpers.time_to_str": "t, w=8", "tinygrad.helpers.to_tuple": "x",
  "tinygrad.helpers.tqdm": "iterable=None, desc='', disable=False, unit='it', unit_scale=False, total=None, rate=100",
  "tinygrad.helpers.trange": "n, **kwargs", "tinygrad.helpers.unwrap": "x",
  "tinygrad.nn.BatchNorm": "sz, eps=1e-05, affine=True, track_running_stats=True, momentum=0.1",
  "tinygrad.nn.BatchNorm2d": "sz, eps=1e-05, affine=True, track_running_stats=True, momentum=0.1",
  "tinygrad.nn.BatchNorm3d": "sz, eps=1e-05, affine=True, track_running_stats=True, momentum=0.1",
  "tinygrad.nn.Conv1d": "in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1, groups=1, bias=True",
  "tinygrad.nn.Conv2d": "in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1, groups=1, bias=True",
  "tinygrad.nn.ConvTranspose1d": "in_channels, out_channels, kernel_size, stride=1, padding=0, output_padding=0, dilation=1, groups=1, bias=True",
  "tinygrad.nn.ConvTranspose2d": "in_channels, out_channels, kernel_size, stride=1, padding=0, output_padding=0, dilation=1, groups=1, bias=True",
  "tinygrad.nn.Embedding": "vocab_size, embed_size", "tinygrad.nn.GroupNorm": "num_groups, num_channels, eps=1e-05, affine=True",
  "tinygrad.nn.InstanceNorm": "num_features, eps=1e-05, affine=True", "tinygrad.nn.LSTMCell": "input_size, hidden_size, bias=True",
  "tinygrad.nn.LayerNorm": "normalized_shape, eps=1e-05, elementwise_affine=True",
  "tinygrad.nn.LayerNorm2d": "normalized_shape, eps=1e-05, elementwise_affine=True",
  "tinygrad.nn.Linear": "in_features, out_features, bias=True", "tinygrad.nn.RMSNorm": "dim, eps=1e-06, elementwise_affine=True",
  "tinygrad.nn.state.TensorIO": "t", "tinygrad.nn.state.accept_filename": "func", "tinygrad.nn.state.get_parameters": "obj",
  "tinygrad.nn.state.get_state_dict": "obj, prefix='', tensor_type=...",
  "tinygrad.nn.state.load_state_dict": "model, state_dict, strict=True, verbose=True, consume=False, realize=True",
  "tinygrad.nn.state.safe_load": "fn", "tinygrad.nn.state.safe_load_metadata": "t",
  "tinygrad.nn.state.safe_save": "tensors, fn, metadata=None", "tinygrad.nn.state.tar_extract": "t", "tinygrad.nn.state.torch_load": "t",
  "tinygrad.nn.state.zip_extract": "t", "tinygrad.nn.optim.Adam": "params, lr=0.001, b1=0.9, b2=0.999, eps=1e-08, device=None, fused=...",
  "tinygrad.nn.optim.AdamW": "params, lr=0.001, b1=0.9, b2=0.999, eps=1e-08, weight_decay=0.01, device=None, fused=...",
  "tinygrad.nn.optim.LAMB": "params, lr=0.001, b1=0.9, b2=0.999, eps=1e-06, weight_decay=0.0, adam=False, device=None, fused=...",
  "tinygrad.nn.optim.LARS": "params, lr=0.001, momentum=0.9, weight_decay=0.0001, ns_steps=0, ns_coefficients=None, nesterov=False, classic=True, pre_wd=True, tcoef=0.001, device=None, fused=...",
  "tinygrad.nn.optim.Muon": "params, lr=0.001, momentum=0.95, weight_decay=0.1, ns_steps=5, ns_coefficients=(3.4445, -4.775, 2.0315), nesterov=True, device=None, fused=...",
  "tinygrad.nn.optim.Optimizer": "params, lr, device=None, fused=...", "tinygrad.nn.optim.OptimizerGroup": "*optimizers",
  "tinygrad.nn.optim.SGD": "params, lr=0.001, momentum=0.0, weight_decay=0.0, nesterov=False, classic=False, device=None, fused=...",
  "tinygrad.device.Allocator": "dev, supports_copy_from_disk=True, supports_transfer=True",
  "tinygrad.device.Buffer": "device, size, dtype, opaque=None, options=None, initial_value=None, uop_refcount=0, base=None, offset=0, preallocate=False",
  "tinygrad.device.Compiled": "device, allocator, renderers, runtime, graph=None, arch=None",
  "tinygrad.device.LRUAllocator": "dev, **kwargs", "tinygrad.device.MultiBuffer": "device, size, dtype",
  "tinygrad.device.canonicalize_device": "device", "tinygrad.renderer.Renderer": "target",
}
# yes names whose parameters differ from tinygrad's, with why (docs/tensor-api.md's row for the name says so too)
CALL_SHAPE_DIFFERENCES = {
  "tinygrad.UOp": "the core's own node constructor", "tinygrad.Variable": "no multiple_of or param (tinygrad's scheduler's)",
  "tinygrad.helpers.Target": "no indices field", "tinygrad.device.Buffer": "the plugin contract's", "tinygrad.device.Allocator": "the plugin contract's",
  "tinygrad.device.LRUAllocator": "the plugin contract's", "tinygrad.device.Compiled": "the plugin contract's",
  "tinygrad.renderer.Renderer": "the plugin contract's",
}

def _module_table() -> dict[str, dict[str, str]]:
  """docs/tensor-api.md's table of tinygrad's module names: module -> name -> 'yes' or 'no'."""
  text = (pathlib.Path(__file__).resolve().parents[1] / "docs" / "tensor-api.md").read_text()
  section = text.split("### Every name tinygrad master's modules define")[1].split("\n## ")[0]
  out: dict[str, dict[str, str]] = {}
  for line in section.splitlines():
    cells = [c.strip() for c in line.split("|")]
    if len(cells) == 6 and cells[1].startswith("`tinygrad") and cells[3] in ("yes", "no"):
      for name in re.findall(r"`([^`]+)`", cells[2]):
        assert name not in out.setdefault(cells[1].strip("`"), {}), f"{name} is in the table of {cells[1]} twice"
        out[cells[1].strip("`")][name] = cells[3]
  return out

def _call_shape_problems(theirs: inspect.Signature, ours: inspect.Signature) -> list[str]:
  """tinygrad's parameters a call could pass that ours would not take: by position and name, or as keywords."""
  P = inspect.Parameter
  mine = list(ours.parameters.values())
  positional = [q.name for q in mine if q.kind in (P.POSITIONAL_ONLY, P.POSITIONAL_OR_KEYWORD)]
  var_pos, var_kw = any(q.kind is P.VAR_POSITIONAL for q in mine), any(q.kind is P.VAR_KEYWORD for q in mine)
  problems = []
  for i, p in enumerate(q for q in theirs.parameters.values() if q.kind is P.POSITIONAL_OR_KEYWORD):
    if i < len(positional) and positional[i] != p.name: problems.append(f"parameter {i} is {p.name!r}, ours {positional[i]!r}")
    elif i >= len(positional) and not (var_pos and p.name in ours.parameters or var_kw): problems.append(f"no parameter {p.name!r}")
  problems += [f"no keyword {p.name!r}" for p in theirs.parameters.values() if p.kind is P.KEYWORD_ONLY and p.name not in ours.parameters and not var_kw]
  return problems

def test_every_tinygrad_module_name_is_in_the_table():
  table = _module_table()
  missing = {m: [n for n in names if n not in table.get(m, {})] for m, names in TINYGRAD_MODULE_NAMES.items()}
  assert not any(missing.values()), f"tinygrad names docs/tensor-api.md does not list: { {m: ns for m, ns in missing.items() if ns} }"
  extra = {m: [n for n in names if n not in TINYGRAD_MODULE_NAMES[m]] for m, names in table.items()}
  assert not any(extra.values()), f"docs/tensor-api.md lists names tinygrad does not define: {extra}"
  absent, shapes = [], {}
  for m, names in table.items():
    mod = importlib.import_module(m.replace("tinygrad", "tinycore", 1))
    for n, yes in names.items():
      if (yes == "yes") != hasattr(mod, n): absent.append(f"{m}.{n} ({yes})")
      elif yes == "yes" and (spec := TINYGRAD_CALL_SHAPES.get(f"{m}.{n}")) is not None:
        scope: dict = {}
        exec(f"def f({spec.replace('...', 'None')}): pass", scope)
        if (found := _call_shape_problems(inspect.signature(scope["f"]), inspect.signature(getattr(mod, n)))): shapes[f"{m}.{n}"] = found
  assert not absent, f"docs/tensor-api.md says the opposite of tinycore for {absent}"
  assert set(shapes) == set(CALL_SHAPE_DIFFERENCES), \
    f"call shapes differing from tinygrad's (fix ours, or list a real difference): { {k: v for k, v in shapes.items() if k not in CALL_SHAPE_DIFFERENCES} }; " \
    f"listed but the same now: {set(CALL_SHAPE_DIFFERENCES) - set(shapes)}"

def test_every_tinygrad_context_variable_is_accepted_and_documented():
  from tinycore.helpers import ContextVar
  text = (pathlib.Path(__file__).resolve().parents[1] / "docs" / "tensor-api.md").read_text()
  effects = text.split("Context variables tinygrad accepts, and what each does here")[1].split("\n\n")[1]
  documented = set(re.findall(r"`([A-Z0-9_]+)`", "".join(line.split("|")[1] for line in effects.splitlines() if line.startswith("| `"))))
  assert set(TINYGRAD_CONTEXT_VARIABLES) - documented == set(), f"Context variables the table does not say the effect of: {set(TINYGRAD_CONTEXT_VARIABLES) - documented}"
  for k in TINYGRAD_CONTEXT_VARIABLES:
    with Context(**{k: ContextVar._registry[k].value}): pass
  with Context(NO_COLOR=1): assert colored("x", "red") == "x"
  assert colored("x", "red") != "x"

def test_dev_names_the_default_device_and_parses_tinygrads_form():
  from tinycore import Device
  from tinycore.helpers import DEV, Target
  with Context(DEV="PYTHON"):
    assert Device.DEFAULT == "PYTHON" and Tensor([1.0]).device == "PYTHON" and DEV.device == "PYTHON"
  with Context(DEV="cpu:1"): assert Device.DEFAULT == "CPU:1" and DEV.renderer == ""
  with Context(DEV="CPU:LLVM"): assert Device.DEFAULT == "CPU" and DEV.renderer == "LLVM"
  assert Target.parse("MOCK+AMD:LLVM:gfx1100") == Target("AMD", "LLVM", "gfx1100", "MOCK")
  with pytest.raises(ValueError, match="DEVICE"): Target.parse("A:B:C:D")

def test_function_is_tinygrads_decorator_and_renderer_dtypes_are_callable():
  import tinycore
  from tinycore import function, Device
  @function
  def f(x): return x * 2
  @function(precompile=True, allow_implicit=True)
  def g(x): return x + 1
  assert tinycore.function is function and f(Tensor([1.0])).tolist() == [2.0] and g(Tensor([1.0])).tolist() == [2.0]
  with pytest.raises(NotImplementedError, match="grad_fxn"): function(lambda x: x, grad_fxn=lambda *a: a)
  r = Device[Device.DEFAULT].renderer
  assert dtypes.float32 in r.supported_dtypes() and r.supported_dtypes() == r.supported_dtypes

def test_small_helpers_tinygrad_programs_import():
  from tinycore.helpers import argsort, get_shape, fully_flatten, cdiv, cmod, next_power2, polyN, merge_dicts, time_to_str, size_to_str, ansistrip, temp
  assert argsort([3, 1, 2]) == [1, 2, 0] and argsort((3, 1, 2)) == (1, 2, 0) and get_shape([[1, 2], [3, 4], [5, 6]]) == (3, 2)
  with pytest.raises(ValueError, match="ragged"): get_shape([[1], [2, 3]])
  assert fully_flatten([[1, [2, 3]], np.array([4, 5])]) == [1, 2, 3, 4, 5] and (cdiv(-7, 2), cmod(-7, 2), cdiv(7, 0)) == (-3, -1, 0)
  assert [next_power2(x) for x in (0, 1, 5, 8)] == [1, 1, 8, 8] and polyN(2.0, [1, 2, 3]) == 11.0
  assert merge_dicts([{"a": 1}, {"b": 2, "a": 1}]) == {"a": 1, "b": 2}
  with pytest.raises(RuntimeError, match="'a'"): merge_dicts([{"a": 1}, {"a": 2}])
  assert time_to_str(12).strip() == "12.00s" and time_to_str(0.5).strip() == "500.00ms" and size_to_str(3 << 20) == "3.00 MB"
  assert ansistrip(colored("hi", "green")) == "hi" and temp("x").endswith("/x")

# ***** forward and backward against PyTorch, op by op *****

def _rng_inputs(shapes, seed, low, high):
  rng = np.random.default_rng(seed)
  return [rng.uniform(low, high, s).astype(np.float32) for s in shapes]

# (name, input shapes, tinycore fn, torch fn, input range); the functions take the inputs as positional tensors
TORCH_CASES = [
  ("pow_zero_base", [(6,)], lambda x: (x * Tensor([0, 0, 0, 1, 1, 1.0])).pow(Tensor([2.0, 0.0, 1.0, 2.0, 0.0, -1.0])),
   lambda t, x: (x * t.tensor([0, 0, 0, 1, 1, 1.0])).pow(t.tensor([2.0, 0.0, 1.0, 2.0, 0.0, -1.0])), (0.5, 2)),
  ("pow_tensor_exp", [(3, 4), (3, 4)], lambda a, b: a.pow(b), lambda t, a, b: a.pow(b), (0.2, 2)),
  ("clip_at_bounds", [(8,)], lambda x: (x.round() * 0.5).clip(-0.5, 0.5), lambda t, x: (x.round() * 0.5).clamp(-0.5, 0.5), (-2, 2)),
  ("sigmoid_extreme", [(4,)], lambda x: (x * 200).sigmoid(), lambda t, x: (x * 200).sigmoid(), (-3, 3)),
  ("tanh", [(3, 4)], lambda x: (x * 30).tanh(), lambda t, x: (x * 30).tanh(), (-2, 2)),
  ("logsumexp_axes", [(2, 3, 4)], lambda x: x.logsumexp((0, 2)), lambda t, x: x.logsumexp((0, 2)), (-3, 3)),
  ("logsumexp_keepdim", [(2, 3, 4)], lambda x: x.logsumexp(1, keepdim=True), lambda t, x: x.logsumexp(1, keepdim=True), (-3, 3)),
  ("normalize", [(3, 4)], lambda x: x.normalize(dim=1), lambda t, x: t.nn.functional.normalize(x, dim=1), (-1, 1)),
  ("gelu", [(10,)], lambda x: x.gelu(), lambda t, x: t.nn.functional.gelu(x, approximate="tanh"), (-4, 4)),
  ("silu_mish_softplus", [(10,)], lambda x: x.silu() + x.mish() + x.softplus(), lambda t, x: t.nn.functional.silu(x) + t.nn.functional.mish(x) + t.nn.functional.softplus(x), (-4, 4)),
  ("elu_celu_selu", [(10,)], lambda x: x.elu() + x.celu(0.5) + x.selu(), lambda t, x: t.nn.functional.elu(x) + t.nn.functional.celu(x, 0.5) + t.nn.functional.selu(x), (-3, 3)),
  ("hard_activations", [(10,)], lambda x: x.hardswish() + x.hardsigmoid() + x.relu6() + x.hardtanh(),
   lambda t, x: t.nn.functional.hardswish(x) + t.nn.functional.hardsigmoid(x) + t.nn.functional.relu6(x) + t.nn.functional.hardtanh(x), (-7, 7)),
  ("trig_inverse", [(8,)], lambda x: x.asin() + x.acos() + x.atan() + x.atanh(), lambda t, x: x.asin() + x.acos() + x.atan() + x.atanh(), (-0.9, 0.9)),
  ("hyperbolic", [(8,)], lambda x: x.sinh() + x.cosh() + x.asinh(), lambda t, x: x.sinh() + x.cosh() + x.asinh(), (-2, 2)),
  ("erf_log_sqrt", [(8,)], lambda x: x.erf() + x.log() + x.sqrt() + x.rsqrt() + x.log2(), lambda t, x: x.erf() + x.log() + x.sqrt() + x.rsqrt() + x.log2(), (0.1, 3)),
  ("copysign_lerp_logaddexp", [(6,), (6,)], lambda a, b: a.copysign(b) + a.lerp(b, 0.3) + a.logaddexp(b),
   lambda t, a, b: a.copysign(b) + a.lerp(b, 0.3) + t.logaddexp(a, b), (-2, 2)),
  ("maximum_minimum", [(3, 4), (4,)], lambda a, b: a.maximum(b) + a.minimum(0.25), lambda t, a, b: t.maximum(a, b) + t.clamp(a, max=0.25), (-1, 1)),
  ("div_modes", [(6,), (6,)], lambda a, b: a / b + a.div(b, rounding_mode="floor").detach() + a.div(b, rounding_mode="trunc").detach(),
   lambda t, a, b: a / b + t.div(a, b, rounding_mode="floor").detach() + t.div(a, b, rounding_mode="trunc").detach(), (0.5, 3)),
  ("var_std_prod", [(3, 4)], lambda x: x.var(1) + x.std(0).sum() + x.prod(1), lambda t, x: x.var(1) + x.std(0).sum() + x.prod(1), (0.5, 1.5)),
  ("softmax_family", [(3, 5)], lambda x: x.softmax(0) * 2 + x.log_softmax(1) + x.softmin(1), lambda t, x: x.softmax(0) * 2 + x.log_softmax(1) + t.nn.functional.softmin(x, 1), (-2, 2)),
  ("cumulative", [(3, 4)], lambda x: x.cumsum(1) + x.cumprod(0).sum(0) + x.cummax(1)[0], lambda t, x: x.cumsum(1) + x.cumprod(0).sum(0) + x.cummax(1)[0], (0.5, 1.5)),
  ("max_min_mean", [(3, 4)], lambda x: x.max(1) + x.min(1) + x.mean(1), lambda t, x: x.amax(1) + x.amin(1) + x.mean(1), (-1, 1)),
  ("matmul_1d_and_broadcast", [(4,), (2, 4, 3), (3,)], lambda a, b, c: (a @ b) @ c, lambda t, a, b, c: (a @ b) @ c, (-1, 1)),
  ("einsum", [(2, 3, 4), (2, 4, 5), (3, 3)], lambda a, b, c: Tensor.einsum("...ij,...jk->...ik", a, b).sum(-1) + Tensor.einsum("ii->i", c).sum(),
   lambda t, a, b, c: t.einsum("...ij,...jk->...ik", a, b).sum(-1) + t.einsum("ii->i", c).sum(), (-1, 1)),
  ("pad_modes", [(1, 2, 5)], lambda x: x.pad((2, 1), mode="reflect") + x.pad((2, 1), mode="replicate") + x.pad((2, 1), mode="circular"),
   lambda t, x: t.nn.functional.pad(x, (2, 1), mode="reflect") + t.nn.functional.pad(x, (2, 1), mode="replicate") + t.nn.functional.pad(x, (2, 1), mode="circular"), (-1, 1)),
  ("movement", [(2, 3, 4)], lambda x: x.permute(2, 0, 1).flip(0).reshape(4, -1).repeat(2, 1).roll(1, 0)[1:, ::2],
   lambda t, x: x.permute(2, 0, 1).flip(0).reshape(4, -1).repeat(2, 1).roll(1, 0)[1:, ::2], (-1, 1)),
  ("gather_scatter", [(3, 4), (2, 4)], lambda a, b: a.gather(0, Tensor([[0, 2, 1, 0], [2, 2, 0, 1]])) + a.scatter_reduce(0, Tensor([[0, 2, 1, 0], [2, 2, 0, 1]]), b, "sum")[:2],
   lambda t, a, b: a.gather(0, t.tensor([[0, 2, 1, 0], [2, 2, 0, 1]])) + a.scatter_reduce(0, t.tensor([[0, 2, 1, 0], [2, 2, 0, 1]]), b, "sum")[:2], (-1, 1)),
  ("diagonal_unfold_tri", [(4, 4)], lambda x: x.diagonal(1).sum() + x.unfold(1, 2, 1).sum((1, 2)).unsqueeze(1) + x.tril(-1) + x.triu(1),
   lambda t, x: x.diagonal(1).sum() + x.unfold(1, 2, 1).sum((1, 2)).unsqueeze(1) + x.tril(-1) + x.triu(1), (-1, 1)),
  ("conv2d", [(1, 2, 5, 5), (3, 2, 3, 3), (3,)], lambda x, w, b: x.conv2d(w, b, stride=2, padding=1, dilation=1),
   lambda t, x, w, b: t.nn.functional.conv2d(x, w, b, stride=2, padding=1), (-1, 1)),
  ("conv_transpose2d", [(1, 2, 3, 3), (2, 3, 3, 3)], lambda x, w: x.conv_transpose2d(w, stride=2, padding=1, output_padding=1),
   lambda t, x, w: t.nn.functional.conv_transpose2d(x, w, stride=2, padding=1, output_padding=1), (-1, 1)),
  ("pools", [(1, 1, 5, 5)], lambda x: x.max_pool2d(3, stride=2, padding=1) + x.avg_pool2d(3, stride=2, padding=1),
   lambda t, x: t.nn.functional.max_pool2d(x, 3, stride=2, padding=1) + t.nn.functional.avg_pool2d(x, 3, stride=2, padding=1), (-1, 1)),
  ("interpolate", [(1, 1, 3, 4)], lambda x: x.interpolate((5, 6), mode="linear"),
   lambda t, x: t.nn.functional.interpolate(x, (5, 6), mode="bilinear"), (-1, 1)),
  ("sdpa_causal", [(1, 2, 4, 3), (1, 2, 4, 3), (1, 2, 4, 3)], lambda q, k, v: q.scaled_dot_product_attention(k, v, is_causal=True),
   lambda t, q, k, v: t.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True), (-1, 1)),
  ("losses", [(4, 3), (4, 3)], lambda x, y: x.cross_entropy(Tensor([0, 2, 1, 2])) + x.binary_crossentropy_logits(y.sigmoid()) + x.log_softmax(1).nll_loss(Tensor([1, 0, 2, 2])),
   lambda t, x, y: t.nn.functional.cross_entropy(x, t.tensor([0, 2, 1, 2])) + t.nn.functional.binary_cross_entropy_with_logits(x, y.sigmoid())
   + t.nn.functional.nll_loss(x.log_softmax(1), t.tensor([1, 0, 2, 2])), (-2, 2)),
]

@pytest.mark.parametrize("name,shapes,fn,ref,rng", TORCH_CASES, ids=[c[0] for c in TORCH_CASES])
def test_forward_and_backward_match_torch(name, shapes, fn, ref, rng):
  torch = pytest.importorskip("torch")
  xs = _rng_inputs(shapes, len(name), *rng)
  ts = [Tensor(x, requires_grad=True) for x in xs]
  rs = [torch.tensor(x, requires_grad=True) for x in xs]
  out, want = fn(*ts), ref(torch, *rs)
  assert out.shape == tuple(want.shape), (out.shape, want.shape)
  w = np.random.default_rng(1).uniform(0.5, 1.5, want.shape).astype(np.float32)  # an uneven upstream gradient
  grads = (out * Tensor(w)).sum().gradient(*ts)
  (want * torch.tensor(w)).sum().backward()
  np.testing.assert_allclose(out.numpy(), want.detach().numpy(), rtol=1e-4, atol=1e-5, err_msg=f"{name} forward")
  for i, (g, r) in enumerate(zip(grads, rs)):
    np.testing.assert_allclose(g.numpy(), r.grad.numpy() if r.grad is not None else 0, rtol=1e-3, atol=1e-4, err_msg=f"{name} grad of input {i}")

def test_half_matmul_gradient_and_dtype_results():
  torch = pytest.importorskip("torch")
  a, b = _rng_inputs([(8, 16), (16, 4)], 5, -1, 1)
  ta, tb = Tensor(a).half(), Tensor(b).half()
  ga, gb = (ta @ tb).float().sum().gradient(ta, tb)
  ra, rb = torch.tensor(a).half().requires_grad_(), torch.tensor(b).half().requires_grad_()
  (ra @ rb).float().sum().backward()
  assert ga.dtype == dtypes.float16
  np.testing.assert_allclose(ga.numpy(), ra.grad.float().numpy(), rtol=1e-2, atol=1e-2)
  np.testing.assert_allclose(gb.numpy(), rb.grad.float().numpy(), rtol=1e-2, atol=1e-2)
  assert Tensor.arange(3).dtype == dtypes.int32 and Tensor.arange(0, 1, 0.5).dtype == dtypes.float32
  assert Tensor([1, 2]).maximum(1.5).dtype == dtypes.float32 and Tensor([1, 2]).sum(dtype=dtypes.float32).dtype == dtypes.float32
  assert (Tensor([1, 2], dtype=dtypes.int8) << 2).dtype == dtypes.int8 and (Tensor([-8]) >> 1).item() == -4
  inf, nan = float("inf"), float("nan")
  np.testing.assert_equal(Tensor([1.0, inf, nan]).isclose(Tensor([1.0 + 1e-9, inf, nan])).numpy(), [True, True, False])

# ***** state: assign, replace, realize, devices, .grad *****

def test_from_url_over_http_from_a_local_server(tmp_path, monkeypatch):
  import functools, gzip, http.server, threading
  (tmp_path / "w.bin").write_bytes(np.array([1.5, -2.0, 3.25], np.float32).tobytes())
  (tmp_path / "w.gz").write_bytes(gzip.compress(bytes([7, 8, 9])))
  server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(tmp_path)))
  server.RequestHandlerClass.log_message = lambda *a: None
  threading.Thread(target=server.serve_forever, daemon=True).start()
  monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
  try:
    base = f"http://127.0.0.1:{server.server_address[1]}"
    np.testing.assert_equal(Tensor.from_url(f"{base}/w.bin", dtype=dtypes.float32).numpy(), [1.5, -2.0, 3.25])
    t = Tensor.from_url(f"{base}/w.gz", gunzip=True)
    assert t.dtype == dtypes.uint8 and t.tolist() == [7, 8, 9]
    (tmp_path / "w.bin").unlink()  # a second read comes from the download cache
    np.testing.assert_equal(Tensor.from_url(f"{base}/w.bin", dtype=dtypes.float32).numpy(), [1.5, -2.0, 3.25])
    with pytest.raises(OSError, match="put the file at"): Tensor.from_url(f"{base}/missing.bin")
  finally: server.shutdown()

def test_assign_forms_and_views_see_the_write():
  w = Tensor.zeros(2, 3).contiguous().realize()
  row = w[1]
  w.assign(Tensor([1.0, 2.0, 3.0]))  # broadcast to (2, 3)
  np.testing.assert_equal(w.numpy(), [[1, 2, 3], [1, 2, 3]])
  w.assign([[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]).realize()  # a list, in w's dtype
  w.assign(w)  # itself: nothing changes
  np.testing.assert_equal(row.numpy(), [3, 4, 5])  # a view of w reads the buffer
  w.assign(7)
  np.testing.assert_equal(w.numpy(), np.full((2, 3), 7.0))
  w[0, 1:].assign(Tensor([8.0, 9.0]))  # through a view into w's buffer
  np.testing.assert_equal(w.numpy(), [[7, 8, 9], [7, 7, 7]])
  with pytest.raises(RuntimeError, match="dtype"): w.assign(Tensor([[1, 2, 3]] * 2))

def test_replace_takes_the_graph_dtype_and_device_without_writing():
  a = Tensor([1.0, 2.0]).contiguous().realize()
  view = a.reshape(2, 1)
  a.replace(Tensor([5, 6], dtype=dtypes.int32, device="CPU:1"))
  assert a.dtype == dtypes.int32 and a.device == "CPU:1" and a.tolist() == [5, 6]
  np.testing.assert_equal(view.numpy().reshape(-1), [1.0, 2.0])  # the old buffer was not written
  with pytest.raises(ValueError, match="shape"): a.replace(Tensor([1, 2, 3]))

def test_realize_many_tensors_in_one_call():
  a, b = Tensor.arange(4).float() * 2, Tensor.ones(3) + 1
  assert a.realize(b) is a
  assert a.uop.is_realized and b.uop.is_realized
  np.testing.assert_equal(a.numpy(), [0, 2, 4, 6])
  np.testing.assert_equal(b.numpy(), [2, 2, 2])
  Tensor.realize_all(a, b)  # already realized: nothing to run

def test_to_and_shard_argument_forms():
  x = Tensor.arange(8).reshape(2, 4).float()
  assert x.to(None).device == x.device and x.to("cpu:1").device == "CPU:1"
  assert x.to(["CPU:0", "CPU:1"]).device == ("CPU", "CPU:1")  # a list: replicated
  assert x.shard(("CPU:1",)).device == "CPU:1"  # one device: a plain copy
  y = x.shard(["CPU:0", "CPU:1"], axis=-1)
  assert y.device == ("CPU", "CPU:1") and y.uop.arg == 1
  np.testing.assert_equal(y.numpy(), x.numpy())
  z = Tensor.ones(2, 4).shard_like(y)
  assert z.device == y.device and z.uop.arg == 1 and z.shard_like(y) is z
  np.testing.assert_equal((z + y).numpy(), x.numpy() + 1)
  assert Tensor.ones(2).shard_like(x).device == x.device
  r = Tensor.ones(3).shard(("CPU:0", "CPU:1"))
  assert Tensor.zeros(3).shard_like(r).uop.arg is None  # replicated like r
  s = Tensor.arange(4).float()
  s.shard_(("CPU:0", "CPU:1"), axis=-1)
  assert s.device == ("CPU", "CPU:1") and s.tolist() == [0, 1, 2, 3]

def test_backward_fills_grad_in_every_form_tinygrad_has():
  t = Tensor([1.0, 2.0, 3.0, 4.0])  # tinygrad master's own docstring example: it has no requires_grad
  t.sum().backward()
  np.testing.assert_equal(t.grad.numpy(), [1, 1, 1, 1])
  plain = Tensor([1.0, 2.0])
  (plain * 2).sum().backward()  # nothing sets requires_grad: every float tensor of the graph gets a grad (tinygrad master's rule)
  np.testing.assert_equal(plain.grad.numpy(), [2, 2])
  a, w = Tensor([1.0, 2.0], requires_grad=True), Tensor([[1.0], [3.0]], requires_grad=True)
  data = Tensor([[1.0], [1.0]])  # requires_grad left unset: input data, which gets no gradient
  h = a.reshape(1, 2) @ (w * data)
  loss = (h * h).sum()
  loss.backward()
  np.testing.assert_equal(a.grad.numpy(), [2 * 7 * 1, 2 * 7 * 3])  # d(h^2)/da = 2h w, h = 7
  np.testing.assert_equal(h.grad.numpy(), [[14]])  # intermediate tensors computed from a parameter get theirs too
  assert loss.grad.item() == 1.0 and data.grad is None
  (a * 3).sum().backward()  # a second backward adds
  np.testing.assert_equal(a.grad.numpy(), [17, 45])
  v = Tensor([1.0, 2.0, 3.0], requires_grad=True)
  (v * v).backward(gradient=Tensor([1.0, 0.5, 0.0]))  # a non-scalar value with its upstream gradient
  np.testing.assert_equal(v.grad.numpy(), [2, 2, 0])
  stats, i = Tensor([1.0, 1.0], requires_grad=False), Tensor([1, 2])
  (a * stats + i).sum().backward()
  assert stats.grad is None and i.grad is None  # requires_grad=False and int tensors get none
  m = Tensor([2.0, 3.0], requires_grad=True)
  (m * m).sum().backward()
  moved = m.to("CPU:1")
  assert moved.grad.device == "CPU:1" and moved.grad.tolist() == [4, 6]
  m.to_("CPU:1")
  assert m.device == "CPU:1" and m.grad.device == "CPU:1"

def test_setitem_is_differentiable_where_it_updates_the_graph():
  x, v = Tensor([1.0, 2.0, 3.0, 4.0], requires_grad=True), Tensor([10.0, 20.0], requires_grad=True)
  y = x * 2
  y[1:3] = v * 3
  (y * Tensor([1.0, 2.0, 3.0, 4.0])).sum().backward()
  np.testing.assert_equal(y.numpy(), [2, 30, 60, 8])
  np.testing.assert_equal(x.grad.numpy(), [2, 0, 0, 8])  # written positions pass nothing to x
  np.testing.assert_equal(v.grad.numpy(), [6, 9])
  buf = Tensor([1.0, 2.0, 3.0]).contiguous().realize()
  view = buf[0:2]
  view[0] = 9.0  # a view of a buffer writes into it
  np.testing.assert_equal(buf.numpy(), [9, 2, 3])
  with pytest.raises(RuntimeError, match="clone"): x[0] = 1.0

@pytest.mark.parametrize("device", ["PYTHON", "CPU"])
def test_svd_reconstructs_with_orthonormal_factors_and_torchs_singular_values(device):
  try: import torch
  except ImportError: torch = None  # numpy's svd has torch.linalg.svd's shapes and singular values
  rng = np.random.default_rng(3)
  rank_deficient = rng.standard_normal((4, 4)).astype(np.float32)
  rank_deficient[:, 3] = rank_deficient[:, 1]  # a zero singular value: U still orthonormal
  for a in [rng.standard_normal((4, 3)).astype(np.float32), rng.standard_normal((2, 3, 5)).astype(np.float32), rank_deficient,
            np.array([[-2.0]], np.float32)]:
    for full in (True, False):
      U, S, Vh = (x.numpy() for x in Tensor(a, device=device).svd(full_matrices=full))
      for tU, tS, tVh in [np.linalg.svd(a, full_matrices=full)] + ([torch.linalg.svd(torch.tensor(a), full_matrices=full)] if torch else []):
        assert U.shape == tuple(tU.shape) and S.shape == tuple(tS.shape) and Vh.shape == tuple(tVh.shape)
        np.testing.assert_allclose(S, np.asarray(tS), atol=2e-5)
      assert (S >= 0).all() and (np.diff(S, axis=-1) <= 0).all()
      k = S.shape[-1]
      np.testing.assert_allclose((U[..., :k] * S[..., None, :]) @ Vh[..., :k, :], a, atol=2e-5)
      for Q in (np.swapaxes(U, -1, -2), Vh):
        np.testing.assert_allclose(Q @ np.swapaxes(Q, -1, -2), np.broadcast_to(np.eye(Q.shape[-2]), Q.shape[:-1] + Q.shape[-2:-1]), atol=2e-5)
  with pytest.raises(ValueError, match="matrix"): Tensor([1.0, 2.0]).svd()

def test_max_shape_and_max_numel_take_each_variables_bound():
  t = Tensor.ones(8, 3)[:Variable("n", 2, 8).bind(5)]
  assert t.max_shape == (8, 3) and t.max_numel() == 24
  assert Tensor.ones(2, 3).max_shape == (2, 3) and Tensor(1.0).max_numel() == 1

# ***** keccak and hash against hashlib *****
KECCAK_RATES = {"sha3_224": 144, "sha3_256": 136, "sha3_384": 104, "sha3_512": 72, "shake_128": 168, "shake_256": 136}

@pytest.mark.parametrize("device", ["PYTHON", "CPU"])
def test_keccak_matches_hashlib_at_the_block_edges(device):
  import hashlib
  rng = np.random.default_rng(4)
  for cfg, rate in KECCAK_RATES.items():
    # every length at a block edge on CPU; the PYTHON interpreter runs the edges of one config (the graph is the same for all)
    for n in (0, rate - 1, rate, rate + 1) if device == "CPU" or cfg == "sha3_256" else ():
      msg = rng.integers(0, 256, (2, n), dtype=np.uint8)  # two rows: two digests
      want = [getattr(hashlib, cfg)(row.tobytes()) for row in msg]
      want = [w.digest((200 - rate) // 2) if cfg.startswith("shake") else w.digest() for w in want]
      assert [bytes(row) for row in Tensor(msg, device=device).keccak(cfg).numpy()] == want, (cfg, n)
  words = np.arange(6, dtype=np.int32).reshape(2, 1, 3)  # another dtype hashes its little-endian bytes; leading dims stay
  got = Tensor(words, device=device).keccak()
  assert got.shape == (2, 1, 32) and got.dtype == dtypes.uint8
  assert [bytes(g) for g in got.numpy().reshape(2, 32)] == [hashlib.sha3_256(w.tobytes()).digest() for w in words.reshape(2, 3)]
  keccak256_of_nothing = "c5d2460186f7233c927e7db2dcc703c0e500b653ca82273b7bfad8045d85a470"  # Keccak-256 (suffix 0x01), as Ethereum uses it
  assert bytes(Tensor(np.zeros(0, np.uint8), device=device).keccak((136, 0x01)).numpy()).hex() == keccak256_of_nothing
  assert Tensor.zeros(0, 4, dtype=dtypes.uint8, device=device).keccak().shape == (0, 32)
  from tinycore.runtime.device import GlobalCounters
  before = GlobalCounters.kernel_count
  Tensor(np.zeros((2, 200), np.uint8), device=device).keccak()  # two blocks of sha3_256
  assert GlobalCounters.kernel_count - before <= 2 * 24 + 6, "a Keccak round should be one kernel"
  if device == "CPU":  # inside a TinyJit, which captures and replays its kernels
    jitted = TinyJit(lambda x: x.keccak())
    for m in rng.integers(0, 256, (4, 1, 20), dtype=np.uint8): assert bytes(jitted(Tensor(m, device=device)).numpy()[0]) == hashlib.sha3_256(m.tobytes()).digest()
  with pytest.raises(ValueError, match="unknown keccak"): Tensor(b"x").keccak("md5")
  with pytest.raises(ValueError, match="rate"): Tensor(b"x").keccak((100, 6))
  with pytest.raises(ValueError, match="0-d"): Tensor(3).keccak()

def test_hash_is_tinygrads_shake128_of_4k_piece_digests():
  import hashlib
  mib = 1 << 20
  def hash_mib(b: bytes) -> bytes: return hashlib.shake_128(b"".join(hashlib.shake_128(b[i:i + 4096]).digest(16) for i in range(0, mib, 4096))).digest(16)
  msg = np.array([1.5, -2.0, 3.25], np.float32)  # its bytes, little-endian
  got = Tensor(msg, device="CPU").hash()
  assert got.shape == (16,) and got.dtype == dtypes.uint8 and bytes(got.numpy()) == hash_mib(msg.tobytes() + bytes(mib - msg.nbytes))

@pytest.mark.parametrize("make", [lambda **k: Tensor.uniform(3, **k), lambda **k: Tensor.normal(3, **k), lambda **k: Tensor.randperm(4, **k),
                                  lambda **k: Tensor.kaiming_uniform(3, 4, **k), lambda **k: Tensor.kaiming_normal(3, 4, **k),
                                  lambda **k: Tensor.glorot_uniform(3, 4, **k), lambda **k: Tensor.scaled_uniform(3, 4, **k)])
def test_random_creation_refuses_an_unknown_keyword_and_uses_the_known_ones(make):
  # the **kwargs tinygrad forwards reach rand/randn, whose signatures refuse a misspelt keyword instead of ignoring it
  with pytest.raises(TypeError, match="unexpected keyword argument 'devcie'"): make(devcie="CPU")
  t = make(device="PYTHON")
  assert t.device == "PYTHON" and np.isfinite(t.numpy()).all()
