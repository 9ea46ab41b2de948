"""`python -m tinygrad_nv.ptxas_check DIR [ARCH ...]`: ptxas accepts every NV kernel in a tinycore disk cache directory
(the kernels of a conformance run) for each ARCH (default sm_90 and sm_80), the run's own arch already checked by its
assembler."""
from __future__ import annotations
import hashlib, os, re, sys
from concurrent.futures import ThreadPoolExecutor
from tinycore.runtime.errors import CompileError
from tinygrad_nv.assembler import MAGIC, find_ptxas, kernel_name, run_ptxas, unpack

def retarget(ptx: str, arch: str) -> str:
  """The kernel rendered for arch: the renderer's only arch-dependent line is .target (test_nv checks that)."""
  out, n = re.subn(r"^\.target \w+$", f".target {arch}", ptx, count=1, flags=re.M)
  if n != 1: raise ValueError(f"kernel {kernel_name(ptx)} has no .target line")
  return out

def cached_kernels(root: str) -> tuple[list[tuple[str, str, bool]], list[str]]:
  """((arch, PTX, whether ptxas made its cubin) of every NV binary under a disk cache directory, problems): an entry is
  a sha256 digest + the payload."""
  kernels, problems = [], []
  for dirpath, _, files in os.walk(root):
    for f in sorted(files):
      with open(path := os.path.join(dirpath, f), "rb") as fh: blob = fh.read()
      digest, payload = blob[:32], blob[32:]
      if not payload.startswith(MAGIC): continue
      if hashlib.sha256(payload).digest() != digest: problems.append(f"{path}: corrupt cache entry (checksum)"); continue
      try: arch, ptx, cubin = unpack(payload)
      except CompileError as e: problems.append(f"{path}: {e}"); continue
      kernels.append((arch, ptx, bool(cubin)))
  return kernels, problems

def one_module(ptxs: list[str], arch: str) -> str:
  """The kernels as one PTX module for arch (one ptxas run for all): one header, each entry renamed k<i> so names never clash."""
  if len(ptxs) == 1: return retarget(ptxs[0], arch)
  entries = [re.sub(r"\.entry\s+\w+\(", f".entry k{i}(", p[p.index(".visible .entry"):], count=1) for i, p in enumerate(ptxs)]
  head = retarget(ptxs[0], arch)
  return head[:head.index(".visible .entry")] + "\n".join(entries)

def check(ptxs: list[str], arch: str, ptxas: str) -> list[str]:
  """ptxas's refusals of these kernels for arch (empty: it accepts every one). A batch it refuses is retried kernel by
  kernel, so each refusal names its kernel."""
  try: run_ptxas(one_module(ptxs, arch), arch, ptxas)
  except CompileError as e: return [str(e)] if len(ptxs) == 1 else [msg for p in ptxs for msg in check([p], arch, ptxas)]
  return []

def check_cache_dir(root: str, archs: list[str], ptxas: str, batch: int = 64) -> tuple[int, list[str]]:
  """(how many NV kernels the directory holds, every problem): each kernel through ptxas for each arch, except the arch
  the run itself assembled it for (its binary holds that cubin)."""
  kernels, problems = cached_kernels(root)
  jobs = []
  for arch in archs:
    todo = [ptx for a, ptx, assembled in kernels if not (assembled and a == arch)]
    jobs += [(todo[i:i + batch], arch) for i in range(0, len(todo), batch)]
  with ThreadPoolExecutor(os.cpu_count() or 1) as pool:
    for found in pool.map(lambda job: check(*job, ptxas), jobs): problems += found
  return len(kernels), problems

if __name__ == "__main__":
  if len(sys.argv) < 2: sys.exit("usage: python -m tinygrad_nv.ptxas_check CACHE_DIR [ARCH ...]  (default: sm_90 sm_80)")
  if (ptxas := find_ptxas()) is None:
    why = "ptxas_check: ptxas not found (pip install 'tinygrad-nv[ptxas]', NVIDIA's nvidia-cuda-nvcc-cu12 wheel)"
    if os.environ.get("CI"): sys.exit(why + ", and CI must run this check")
    sys.exit(print(why + "; the kernels were not checked") or 0)
  archs = sys.argv[2:] or ["sm_90", "sm_80"]
  count, problems = check_cache_dir(sys.argv[1], archs, ptxas)
  print(f"ptxas_check: {count} NV kernels assembled by ptxas for {', '.join(archs)}: {len(problems)} problems")
  if count == 0: print(f"  no NV kernel in {sys.argv[1]}: the run must cache its kernels there (TINYCORE_CACHE, CACHELEVEL >= 1)")
  for p in problems[:20]: print("  " + p)
  sys.exit(1 if problems or count == 0 else 0)
