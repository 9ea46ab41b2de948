"""The GPT-2 example against Hugging Face's GPT2LMHeadModel (a tiny random model saved with save_pretrained: nothing is
downloaded): logits and greedy tokens on every backend, compiles per decoded token, sampling, sharding, the tokenizer, the CLI."""
import os
import numpy as np
import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")   # every model and tokenizer here is made in the test: never a download

try: import torch
except ImportError:
  if os.environ.get("CI"): raise  # CI installs torch and transformers (the test extras): a missing one is a failure there
  pytest.skip("the reference is transformers' GPT2LMHeadModel: pip install torch==2.13.0 transformers", allow_module_level=True)
transformers = pytest.importorskip("transformers", reason="the reference is transformers' GPT2LMHeadModel: pip install -e '.[test]'")
from tinycore import Tensor, Device, dtypes, engine  # noqa: E402
from tinycore.nn.serialization import safetensors_load_arrays  # noqa: E402
from tinycore.examples.gpt2 import GPT2, GPT2Config, Generator, Tokenizer, pretokenize, sample, order_keys, top_k_threshold, main  # noqa: E402

PROMPT = [5, 17, 3, 60, 0, 44, 12]
CONTEXT = len(PROMPT) + 32

def hf_model(**kw) -> "transformers.GPT2LMHeadModel":
  # initializer_range 0.3, not 0.02: logits spread far enough apart that greedy choices are never near-ties
  cfg = transformers.GPT2Config(**{"vocab_size": 64, "n_positions": 48, "n_embd": 16, "n_layer": 2, "n_head": 2, "initializer_range": 0.3,
                                   "bos_token_id": 0, "eos_token_id": None, **kw})
  torch.manual_seed(0)
  return transformers.GPT2LMHeadModel(cfg).eval()

def make_reference(tmp_path_factory, **kw):
  """(folder with config.json + model.safetensors, the prompt's logits, 32 greedy tokens) from transformers."""
  hf, path = hf_model(**kw), tmp_path_factory.mktemp("gpt2")
  hf.save_pretrained(path)
  ids = torch.tensor([PROMPT])
  with torch.no_grad():
    logits = hf(ids).logits[0].numpy()
    # an explicit mask: generate would otherwise take token 0 in the prompt for padding
    tokens = hf.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=32, do_sample=False, pad_token_id=0)[0, len(PROMPT):].tolist()
  return path, logits, tokens

@pytest.fixture(scope="module")
def reference(tmp_path_factory): return make_reference(tmp_path_factory)

@pytest.fixture(scope="module")
def reference_1_layer(tmp_path_factory):
  """For the GPU emulators and WEBGPU, where every launch is slow: one layer (two on CPU and PYTHON)."""
  return make_reference(tmp_path_factory, n_layer=1)

def prompt_logits(m: GPT2, device) -> np.ndarray:
  """The prompt's logits through the path prefill takes (a symbolic length and position), without the jit."""
  ids = Tensor(np.pad(np.array(PROMPT, np.int32), (0, m.max_context - len(PROMPT))), device=device)
  return m(ids.shrink(((0, m.n_tokens.bind(len(PROMPT))),)), m.start_pos.bind(0)).numpy()

def check_against_transformers(reference, device: str) -> None:
  path, logits, tokens = reference
  m = GPT2.from_pretrained(path, dtypes.float32, CONTEXT, device)
  np.testing.assert_allclose(prompt_logits(m, device), logits, atol=1e-4, rtol=1e-4)
  assert list(Generator(m).generate(PROMPT, 32)) == tokens

@pytest.mark.parametrize("device", ["CPU", "PYTHON"])
def test_matches_transformers(reference, device):
  check_against_transformers(reference, device)

def test_matches_transformers_on_webgpu(reference_1_layer):
  pytest.importorskip("tinygrad_webgpu", reason="tinygrad-webgpu is not installed")
  from tinygrad_webgpu import driver
  if driver.request_adapter() is None:
    if os.environ.get("CI"): pytest.fail("CI is set but there is no WebGPU adapter")
    pytest.skip("no WebGPU adapter (mesa-vulkan-drivers: see .ci/install-webgpu.sh)")
  check_against_transformers(reference_1_layer, "WEBGPU")

@pytest.mark.parametrize("backend,flag", [("NV", "NV_EMULATE"), ("AMD", "AMD_EMULATE")])
def test_matches_transformers_on_gpu_emulators(reference_1_layer, backend, flag, monkeypatch):
  if backend not in Device:
    if os.environ.get("CI"): pytest.fail(f"CI is set but tinygrad-{backend.lower()} is not installed")
    pytest.skip(f"tinygrad-{backend.lower()} is not installed")
  monkeypatch.setenv(flag, "1")
  check_against_transformers(reference_1_layer, backend)

def test_decode_logits_follow_the_cache(reference):
  # each decode step (one token read as a row of wte at a symbolic position) gives the logits of the full sequence's last position
  path, _, tokens = reference
  hf = transformers.GPT2LMHeadModel.from_pretrained(path).eval()
  m = GPT2.from_pretrained(path, max_context=CONTEXT)
  m(Tensor(np.array(PROMPT, np.int32)), 0).realize()
  seq = PROMPT + tokens[:4]
  with torch.no_grad(): ref = hf(torch.tensor([seq])).logits[0].numpy()
  for pos in range(len(PROMPT), len(seq)):
    got = m(m.token.bind(seq[pos]), m.start_pos.bind(pos)).numpy()
    np.testing.assert_allclose(got[0], ref[pos], atol=1e-4, rtol=1e-4)

def test_untied_head_and_gpt2model_names(reference):
  # save_pretrained of an untied model keeps lm_head.weight; GPT2Model's files have no "transformer." prefix
  hf = hf_model(tie_word_embeddings=False)
  with torch.no_grad(): hf.lm_head.weight.mul_(-1.5)
  arrays = {k.removeprefix("transformer."): v.numpy() for k, v in hf.state_dict().items()}
  m = GPT2(GPT2Config(vocab_size=64, n_positions=48, n_embd=16, n_layer=2, n_head=2, tie_word_embeddings=False), 16).load_hf(arrays)
  with torch.no_grad(): ref = hf(torch.tensor([PROMPT])).logits[0].numpy()
  np.testing.assert_allclose(m(Tensor(np.array(PROMPT, np.int32)), 0).numpy(), ref, atol=1e-4, rtol=1e-4)

def test_bad_weights_and_configs_say_what_is_wrong(reference):
  path = reference[0]
  with pytest.raises(ValueError, match=r"missing \['transformer.h.2"):
    GPT2(GPT2Config(vocab_size=64, n_positions=48, n_embd=16, n_layer=3, n_head=2), 16).load_hf(
      safetensors_load_arrays(path / "model.safetensors"))
  with pytest.raises(ValueError, match="transformer.wte.weight: \\(64, 16\\) where the config gives \\(65, 16\\)"):
    GPT2(GPT2Config(vocab_size=65, n_positions=48, n_embd=16, n_layer=2, n_head=2), 16).load_hf(
      safetensors_load_arrays(path / "model.safetensors"))
  with pytest.raises(ValueError, match="activation_function 'swish' is not implemented"): GPT2Config.from_hf({"activation_function": "swish"})
  with pytest.raises(FileNotFoundError, match="config.json is missing: --weights needs a folder saved by save_pretrained"): GPT2.from_pretrained(path.parent)
  with pytest.raises(ValueError, match="do not fit the context of 12"): next(Generator(GPT2(GPT2Config(vocab_size=64, n_embd=16, n_layer=1, n_head=2), 12)).generate([1] * 8, 6))

def test_decoding_50_tokens_compiles_only_the_first_token_of_each_phase():
  m = GPT2(GPT2Config(vocab_size=64, n_positions=128, n_embd=16, n_layer=2, n_head=2), 80).randomize(1)
  gen, after = Generator(m, temperature=0.9, top_k=8, seed=3), []
  for prompt, start, n in (([1, 2, 3], 0, 50), ([4, 5, 6, 7, 8], 20, 3), ([9], 70, 4)):   # other lengths and positions
    for i, _ in enumerate(gen.generate(prompt, n, start_pos=start)):
      if i < 2 and not after: continue   # the first prefill and the first decode compile
      after.append(dict(engine.stats))
  assert all(s == after[0] for s in after), f"kernels compiled while decoding: {after[0]} -> {after[-1]}"

def test_sampling_is_seeded_and_top_k_one_is_greedy():
  m = GPT2(GPT2Config(vocab_size=64, n_positions=64, n_embd=16, n_layer=1, n_head=2), 24).randomize(2)
  greedy = list(Generator(m).generate([1, 2], 12))
  assert list(Generator(m, temperature=1.5, top_k=1, seed=5).generate([1, 2], 12)) == greedy
  a, b = (list(Generator(m, temperature=2.0, seed=s).generate([1, 2], 12)) for s in (7, 7))
  assert a == b and a != list(Generator(m, temperature=2.0, seed=8).generate([1, 2], 12))

def test_top_k_threshold_is_the_kth_largest_with_ties():
  rng = np.random.default_rng(0)
  x = rng.choice(np.array([-np.inf, -3e38, -2.5, -1e-30, -0.0, 0.0, 1e-30, 0.5, 0.5, 7.0, 3e38], np.float32), (6, 40))
  x[0, :] = 0.5   # one value everywhere
  for k in (1, 2, 5, 17, 40):
    got = top_k_threshold(order_keys(Tensor(x)), k).numpy()[:, 0]
    want = order_keys(Tensor(np.sort(x, 1)[:, -k].copy())).numpy()
    np.testing.assert_array_equal(got, want)

def test_samples_follow_softmax_within_top_k():
  rows, logits = 4000, np.array([2.0, 1.0, 0.5, -1.0, 1.0], np.float32)
  Tensor.manual_seed(0)
  for top_k, keep in ((0, [0, 1, 2, 3, 4]), (3, [0, 1, 4])):   # ties with the 3rd largest (1.0) are all kept: 2.0, 1.0, 1.0
    got = sample(Tensor(np.tile(logits, (rows, 1))), 0.7, top_k).numpy()
    p = np.zeros(5); p[keep] = np.exp(logits[keep] / 0.7); p /= p.sum()
    freq = np.bincount(got, minlength=5) / rows
    assert set(np.unique(got)) <= set(keep)
    assert (np.abs(freq - p) <= 4 * np.sqrt(p * (1 - p) / rows) + 1e-9).all(), (freq, p)   # 4 standard deviations

def test_shard_2_gives_the_same_tokens_as_one_device(reference):
  path = reference[0]
  one = GPT2.from_pretrained(path, max_context=CONTEXT)
  two = GPT2.from_pretrained(path, max_context=CONTEXT).shard(("CPU:0", "CPU:1"))
  assert two.h[0].attn.cache_k.device == two.h[0].mlp.c_fc.weight.device == ("CPU", "CPU:1")
  assert list(Generator(two).generate(PROMPT, 16)) == list(Generator(one).generate(PROMPT, 16)) == reference[2][:16]
  assert list(Generator(two, 1.0, 10, seed=4).generate(PROMPT, 16)) == list(Generator(one, 1.0, 10, seed=4).generate(PROMPT, 16))

def test_half_on_cpu_is_close_to_float32(reference):
  path, logits, _ = reference
  m = GPT2.from_pretrained(path, dtypes.float16, CONTEXT)
  assert m.wte.dtype == dtypes.float16
  np.testing.assert_allclose(prompt_logits(m, "CPU"), logits, atol=0.05 * np.abs(logits).max())

# ***** tokenizer and command line *****

TEXTS = ["Hello world, it's a test of 123 numbers and 4.5e6!", "  leading  and trailing spaces  \n\n\tand tabs\t",
         "héllo wörld — ünïcödé, 日本語のテキスト, emoji 🙂🙃 and ½ ² ٣", "they'll've 'S 'd's I'm 'LL", "a\u00a0b\u2003c\u2028d\x1ce"]

@pytest.fixture(scope="module")
def tok_dir(tmp_path_factory):
  from tokenizers import ByteLevelBPETokenizer
  path = tmp_path_factory.mktemp("tok")
  bpe = ByteLevelBPETokenizer()
  bpe.train_from_iterator(TEXTS * 3 + ["the quick brown fox jumps over the lazy dog " * 3], vocab_size=400, min_frequency=1, show_progress=False)
  bpe.save_model(str(path))
  return path

def test_tokenizer_matches_transformers(tok_dir):
  ref = transformers.GPT2Tokenizer(str(tok_dir / "vocab.json"), str(tok_dir / "merges.txt"))
  ours = Tokenizer.from_dir(tok_dir)
  for text in TEXTS + ["unseen wörds: Zebra's 99 problems\r\n"]:
    assert ours.encode(text) == ref.encode(text), text
    assert ours.decode(ours.encode(text)) == text

def test_pretokenize_pieces():
  assert pretokenize("Hi  there's 42\n\n x") == ["Hi", " ", " there", "'s", " 42", "\n\n", " x"]
  assert pretokenize("  \t") == ["  \t"] and pretokenize("a !?b") == ["a", " !?", "b"]

def test_raw_bytes_without_a_vocabulary():
  t = Tokenizer()
  assert t.encode("hé") == [104, 195, 169] and t.decode([104, 195, 169]) == "hé" and t.token_bytes(300) == b"<300>"

def test_command_line_greedy_ids(reference, tok_dir, capsys):
  path, _, tokens = reference
  out = main(["--weights", str(path), "--tokens", ",".join(map(str, PROMPT)), "--max-new-tokens", "8", "--greedy", "--ids"])
  assert out == tokens[:8]
  assert capsys.readouterr().out.strip().splitlines()[-1] == ",".join(map(str, tokens[:8]))
  # a prompt as text, through a BPE tokenizer, sampled, on two devices
  out = main(["--layers", "1", "--heads", "2", "--width", "16", "--vocab", "400", "--tokenizer", str(tok_dir), "--prompt", "the quick",
              "--max-new-tokens", "4", "--temperature", "0.7", "--top-k", "5", "--seed", "1", "--shard", "2"])
  assert len(out) == 4 and all(0 <= t < 400 for t in out)
  with pytest.raises(SystemExit): main(["--tokens", "1,x"])
