"""REMOTE against local CPU: the digits convnet's training step (TinyJit), time per step and round trips per step, over loopback."""
from __future__ import annotations
import os, pathlib, platform, secrets, statistics, subprocess, sys, tempfile, time
import numpy as np
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

def step_times(device: str, steps: int) -> tuple[list[float], list[int]]:
  from tinycore import Tensor, TinyJit, nn
  from tinycore.nn import optim
  from tinycore.nn.state import get_parameters
  from tinycore.examples.train_digits import ConvNet
  Tensor.manual_seed(0)
  model = ConvNet()
  params = get_parameters(model)
  for p in params: p.replace(p.to(device)).realize()
  opt = optim.Adam(params, lr=1e-3)
  @TinyJit
  def step(x, y):
    opt.zero_grad()
    loss = model(x).sparse_categorical_crossentropy(y)
    loss.backward()
    return loss.realize(*opt.schedule_step())
  rng = np.random.default_rng(0)
  conn = None
  if device.startswith("REMOTE"):
    from tinygrad_remote.connection import connection
    conn = connection()
  times, trips = [], []
  Tensor.training = True
  for _ in range(steps):
    x, y = rng.standard_normal((64, 1, 28, 28)).astype(np.float32), rng.integers(0, 10, 64)
    before, st = conn.round_trips if conn else 0, time.perf_counter()
    step(Tensor(x, device=device), Tensor(y, device=device)).item()
    times.append(time.perf_counter() - st)
    trips.append(conn.round_trips - before if conn else 0)
  return times, trips

def main() -> None:
  steps = int(os.environ.get("STEPS", "20"))
  print(f"machine: {platform.machine()} {platform.processor() or ''} {os.cpu_count()} cores, python {platform.python_version()}")
  if os.environ.get("REMOTE_URL"):   # the child: measure REMOTE
    t, r = step_times("REMOTE", steps)
    print(f"RESULT {statistics.median(t[3:])} {statistics.median(r[3:])} {max(r[3:])}")
    return
  cpu, _ = step_times("CPU", steps)
  with tempfile.TemporaryDirectory() as tmp:
    tf = pathlib.Path(tmp) / "token"; tf.write_text(secrets.token_urlsafe(24))
    server = subprocess.Popen([sys.executable, "-m", "tinygrad_remote", "serve", "--device", "CPU", "--port", "0", "--token-file", str(tf)],
                              stdout=subprocess.PIPE, text=True)
    try:
      url = server.stdout.readline().rsplit(" at ", 1)[1].strip()
      out = subprocess.run([sys.executable, __file__], env={**os.environ, "REMOTE_URL": url, "REMOTE_TOKEN_FILE": str(tf)},
                           capture_output=True, text=True, check=True).stdout
    finally: server.terminate(); server.wait()
  med, trips, worst = (float(v) for v in out.split("RESULT")[1].split())
  c = statistics.median(cpu[3:])
  print(f"digits convnet step, batch 64, TinyJit ({steps} steps, median after 3 warm-up):")
  print(f"  CPU     {c*1e3:8.2f} ms")
  print(f"  REMOTE  {med*1e3:8.2f} ms   ({med/c:.2f}x CPU; server on CPU over loopback)  round trips per step: {trips:g} (max {worst:g})")

if __name__ == "__main__": main()
