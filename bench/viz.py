"""VIZ's load times in headless Chromium: runs of 24 and 105 kernels (test_viz's recipe: a training step, then kernels of
new shapes), the digits convnet, an MLP trained for --steps steps with VIZ on, and that run's timeline grown to --events
events. Per run: the server's preparation, the page's first view, the timeline's redraw, opening the kernel with the most
rewrite steps, and a click on a kernel's launch past the middle of the run (zoomed to it) until its kernel shows."""
from __future__ import annotations
import argparse, json, pathlib, sys, tempfile, threading, time
ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "test")]  # run from a checkout; the recipes and the browser driver are the tests'
import numpy as np

def mlp(steps: int) -> dict:
  from tinycore import Tensor, trace, viz
  from tinycore.nn import Linear
  from tinycore.nn.optim import Adam
  with trace.capturing() as cap, trace.profile() as prof:
    layers = [Linear(64, 64), Linear(64, 10)]
    opt = Adam([p for l in layers for p in (l.weight, l.bias)], lr=1e-3)
    x, y = Tensor(np.random.rand(32, 64).astype(np.float32)).realize(), Tensor(np.random.randint(0, 10, 32)).realize()
    for _ in range(steps):
      with Tensor.train():
        loss = layers[1](layers[0](x).relu()).sparse_categorical_crossentropy(y)
        opt.zero_grad(); loss.backward(); opt.step()
        loss.realize()
  return viz.dump(cap, prof)

def digits() -> dict:
  from tinycore import trace, viz
  from tinycore.examples.train_digits import train
  with trace.capturing() as cap, trace.profile() as prof:
    train(1, 32, 1e-3, pathlib.Path(tempfile.mkdtemp()), subset=96, use_jit=False, prefer_mnist=False, progress=False)
  return viz.dump(cap, prof)

def measure(browser, data: dict) -> dict:
  from tinycore import viz
  st = time.perf_counter()
  srv = viz.server(data, 0)
  prep = time.perf_counter() - st
  threading.Thread(target=srv.serve_forever, daemon=True).start()
  try:
    url = f"http://127.0.0.1:{srv.server_address[1]}/"
    st = time.perf_counter()
    browser.send("Page.navigate", session=True, url=url)
    browser.wait_for("document.body && document.body.dataset.ready", timeout=600)
    ready = time.perf_counter() - st
    draw = browser.js("viz.timeline ? (() => { const t = viz.timeline, out = []; for (let k = 0; k < 5; k++) { t.zoom(k % 2 ? 4 : 0.25); t.draw(); out.push(t.drawMs); } return Math.max(...out); })() : 0")
    # a kernel launch past the middle of the run: zoomed to, then clicked, which opens its kernel
    k = browser.js("(() => { const t = viz.timeline; if (!t) return null; for (let i = 0; i < t.meta.spans; i++) "
                   "if (t.ts[i] > t.end * 0.6 && t.meta.tracks[t.trackOf[i]].queue === 'kernels' && viz.kernelOfSpan(i) !== null) return i; return null; })()")
    opened = float("nan")
    if k is not None:
      browser.js(f"location.hash = 'timeline&span={k}'")
      box = browser.wait_for(f"viz.timeline.selected === {k} && viz.timeline.canvas.isConnected && viz.timeline.spanClientBox({k})")
      st = time.perf_counter()
      for kind in ("mousePressed", "mouseReleased"): browser.mouse(kind, box["x"] + box["w"] / 2, box["y"] + box["h"] / 2, button="left", clickCount=1)
      browser.wait_for(f"viz.shown && viz.shown.g === viz.kernelOfSpan({k})")
      opened = time.perf_counter() - st
    kernels = [i for i, g in enumerate(data["groups"]) if g["kind"] == "kernel"]
    gi = max(kernels, key=lambda i: sum(len(c["steps"]) for c in data["groups"][i]["rewrites"]))
    st = time.perf_counter()
    browser.js(f"location.hash = 'g={gi}'")
    browser.wait_for(f"viz.shown && viz.shown.g === {gi} && viz.shown.c !== undefined")
    kernel = time.perf_counter() - st
    assert browser.errors() == [], browser.errors()
  finally:
    browser.send("Page.navigate", session=True, url="about:blank")
    srv.shutdown(); srv.server_close()
  return {"prep": prep, "ready": ready, "draw_ms": draw, "kernel": kernel, "clicked": opened, "kernels": len(kernels),
          "events": len((data.get("trace") or {}).get("traceEvents", [])), "mb": len(json.dumps(data)) / 2**20}

def main():
  ap = argparse.ArgumentParser(description=__doc__)
  ap.add_argument("--steps", type=int, default=2000, help="training steps of the MLP run (0: leave it out)")
  ap.add_argument("--events", type=int, default=1_000_000, help="events of the grown timeline (0: leave it out)")
  args = ap.parse_args()
  from headless_chromium import Chromium
  from test_viz import record, synthetic_trace
  runs = {"24 kernels": lambda: record(24), "105 kernels": lambda: record(105), "digits convnet, 3 steps": digits}
  if args.steps: runs[f"MLP, {args.steps} steps"] = lambda: mlp(args.steps)
  with tempfile.TemporaryDirectory() as d:
    browser = Chromium(pathlib.Path(d), ["--disable-gpu", "--window-size=1400,1000"])
    try:
      print(f"{'run':32s} {'kernels':>7s} {'events':>9s} {'dump':>8s} {'server':>8s} {'page':>7s} {'redraw':>8s} {'kernel':>7s} {'span click':>10s}")
      last = None
      for name, make in runs.items():
        st = time.perf_counter()
        last = make()
        made = time.perf_counter() - st
        r = measure(browser, last)
        print(f"{name:32s} {r['kernels']:7d} {r['events']:9d} {r['mb']:6.1f}MB {r['prep']:7.2f}s {r['ready']:6.2f}s {r['draw_ms']:6.1f}ms {r['kernel']:6.2f}s {r['clicked']:9.2f}s   (recorded in {made:.1f}s)", flush=True)
      if args.events and last is not None:
        r = measure(browser, synthetic_trace(last, args.events))
        print(f"{'the last, grown':32s} {r['kernels']:7d} {r['events']:9d} {r['mb']:6.1f}MB {r['prep']:7.2f}s {r['ready']:6.2f}s {r['draw_ms']:6.1f}ms {r['kernel']:6.2f}s {r['clicked']:9.2f}s")
    finally: browser.close()

if __name__ == "__main__": main()
