"""Time per inference of PyTorch-exported ONNX models: tinycore's OnnxRunner side by side with onnxruntime, as ratios."""
from __future__ import annotations
import argparse, pathlib, sys, time
HERE = pathlib.Path(__file__).resolve().parent
sys.path = [p for p in sys.path if pathlib.Path(p or ".").resolve() != HERE]  # this file's name must not hide the onnx package
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))  # run from a checkout without installing the core
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "test"))  # the models the tests export
import numpy as np

def best_of(fn, reps: int) -> float:
  fn(); fn()  # compile and warm the caches
  ts = []
  for _ in range(reps):
    st = time.perf_counter()
    fn()
    ts.append(time.perf_counter() - st)
  return min(ts)

def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__)
  ap.add_argument("--device", default=None, help="tinycore device (default: the default device)")
  ap.add_argument("--reps", type=int, default=10)
  args = ap.parse_args()
  import onnxruntime as ort
  from test_onnx_models import _models, _export
  from tinycore.nn.onnx import OnnxRunner
  print(f"{'model':16s} {'tinycore ms':>12s} {'onnxruntime ms':>15s} {'tinycore/ort':>13s}")
  for name, (model, inputs) in _models().items():
    raw = _export(model, inputs, dynamo=False)
    sess = ort.InferenceSession(raw, providers=["CPUExecutionProvider"])
    feeds = {i.name: a.numpy() for i, a in zip(sess.get_inputs(), inputs)}
    runner = OnnxRunner(raw, device=args.device)
    def tc():
      for v in runner(feeds).values(): v.numpy()
    try: t_tc = best_of(tc, args.reps)
    except Exception as e:  # a model the device cannot run is reported, not hidden
      print(f"{name:16s} tinycore failed: {type(e).__name__}: {str(e)[:100]}")
      continue
    t_ort = best_of(lambda: sess.run(None, feeds), args.reps)
    print(f"{name:16s} {t_tc * 1e3:12.3f} {t_ort * 1e3:15.3f} {t_tc / t_ort:13.1f}x")

if __name__ == "__main__": main()
