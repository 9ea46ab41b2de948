"""VIZ: rewrites are captured as plain data (keeping no buffer alive), and the page shows a small training run in headless
Chromium, clicked through over the DevTools protocol, with no request leaving 127.0.0.1."""
import gc, json, os, subprocess, sys, threading, weakref
from pathlib import Path
from urllib.parse import urlparse
import numpy as np
from tinycore.codegen import PASSES
import pytest
from headless_chromium import Chromium
from tinycore import Tensor, trace, viz
from tinycore.nn import Linear
from tinycore.nn.optim import SGD
from tinycore.schedule import buffers
from tinycore.uop import Variable, symbolic_rules
from tinycore.rewrite import graph_rewrite

ROOT = Path(__file__).resolve().parents[1]

def train_step_recorded(n_in: int, n_out: int):
  """Two SGD steps of a small layer with VIZ's capture and the profiler on: the dump the page shows. Kernels are
  compiled once per process, so each test picks sizes of its own (new kernels, whose codegen is recorded)."""
  with trace.capturing() as cap, trace.profile() as prof:
    layer = Linear(n_in, n_out)
    opt = SGD([layer.weight, layer.bias], lr=0.1)
    with Tensor.train():
      for _ in range(2):
        x = Tensor(np.random.default_rng(0).random((8, n_in), dtype=np.float32))
        loss = layer(x).relu().sum()
        opt.zero_grad(); loss.backward(); opt.step()
        loss.item()
  return viz.dump(cap, prof)

def test_capture_records_rules_that_fired_with_graphs_before_and_after():
  data = train_step_recorded(5, 7)
  kernels = [g for g in data["groups"] if g["kind"] == "kernel"]
  assert kernels and any(g["kind"] == "schedule" and g["items"] for g in data["groups"])
  for g in kernels:
    assert g["src"] and g["uops"] and g["binary"] and g["ast"], g["name"]
    assert data["nodes"][g["ast"][0]][0] == "SINK"
  steps = [st for g in kernels for call in g["rewrites"] for st in call["steps"] if not st["rule"].startswith("pass ")]
  assert steps, "codegen applies rules: some step must be recorded"
  for g in kernels:   # each codegen pass is a call of its own, with one step where it changed the graph
    passes = [c for c in g["rewrites"] if c["where"].startswith("pass ")]
    assert [c["where"][5:] for c in passes] == [p.name for p in PASSES], g["name"]
    assert all(st["before"] != st["after"] for c in passes for st in c["steps"]) and passes[-1]["steps"], g["name"]
  for st in steps:
    before, after = data["nodes"][st["before"]], data["nodes"][st["after"]]
    assert before != after and "(" in st["rule"] and st["pattern"].startswith("UPat(")
    assert all(s < st["before"] for s in before[3]), "a node's sources are numbered before it"
  json.dumps(data)  # plain data all the way down

def test_capture_keeps_no_buffer_alive():
  with trace.capturing() as cap:
    t = Tensor(np.arange(6, dtype=np.float32)).realize()
    (t * 2 + 1).sum().realize()
    held = weakref.ref(buffers[t.uop.base])
  assert cap.groups
  del t
  gc.collect()
  assert held() is None, "the capture kept a buffer alive"

def test_rewrites_outside_a_group_and_after_the_capture_are_not_recorded():
  x = Variable("x", 0, 100)
  with trace.capturing() as cap:
    assert graph_rewrite((x + 0) * 1, symbolic_rules) is x, "the rules fire"
    assert cap.groups == [] and cap.nodes == [], "a rewrite outside a schedule or a codegen is not recorded"
    (Tensor([1.0, 2.0, 3.0]) + 17).tolist()
  n = len(cap.groups)
  assert n >= 2 and {g["kind"] for g in cap.groups} == {"schedule", "kernel"}
  (Tensor([1.0, 2.0, 3.0]) * 19).tolist()
  assert len(cap.groups) == n and trace.capture is None, "nothing is recorded once the capture ended"

def test_load_accepts_a_dump_or_a_trace_and_refuses_other_json(tmp_path):
  with trace.profile(tmp_path / "trace.json"): (Tensor([1.0]) + 2).tolist()
  got = viz.load(tmp_path / "trace.json")
  assert got["groups"] == [] and any(e["ph"] == "X" for e in got["trace"]["traceEvents"])
  (tmp_path / "other.json").write_text("[1, 2]")
  with pytest.raises(ValueError, match="neither a VIZ dump nor a Chrome trace"): viz.load(tmp_path / "other.json")

def test_cli_serves_a_saved_trace_on_localhost(tmp_path):
  with trace.profile(tmp_path / "trace.json"): (Tensor([1.0]) + 2).tolist()
  proc = subprocess.Popen([sys.executable, "-m", "tinycore.viz", str(tmp_path / "trace.json"), "--port", "0"], stdout=subprocess.PIPE, text=True)
  try:
    line = proc.stdout.readline()
    assert line.startswith("VIZ: open http://127.0.0.1:"), line
    import urllib.request
    with urllib.request.urlopen(line.split()[2] + "data.json", timeout=10) as r: assert "traceEvents" in json.loads(r.read())["trace"]
  finally: proc.kill(); proc.wait()

# ***** the page in a real browser *****

@pytest.fixture
def browser(tmp_path):
  b = Chromium(tmp_path / "chromium-profile", ["--disable-gpu", "--window-size=1400,1000"])
  yield b
  b.close()

def shots_dir(tmp_path: Path) -> Path:
  """Screenshots go to tmp_path; UPDATE_SCREENSHOTS=1 writes the README's copies in docs/images instead."""
  return ROOT / "docs" / "images" if os.environ.get("UPDATE_SCREENSHOTS") else tmp_path

def test_viz_page_of_a_training_run_in_headless_chromium(browser, tmp_path):
  data = train_step_recorded(9, 11)
  srv = viz.server(data, 0)
  threading.Thread(target=srv.serve_forever, daemon=True).start()
  try:
    url = f"http://127.0.0.1:{srv.server_address[1]}/"
    browser.send("Page.navigate", session=True, url=url)
    assert browser.wait_for("document.body && document.body.dataset.ready") == "1"
    kernels = [g for g in data["groups"] if g["kind"] == "kernel"]
    k = max(range(len(kernels)), key=lambda i: sum(len(c["steps"]) for c in kernels[i]["rewrites"]))
    g = kernels[k]
    names = browser.js("[...document.querySelectorAll('#list .item')].map((e) => e.textContent)")
    assert names[0] == "profiletimeline" and len(names) == 1 + len(data["groups"])
    # the kernel with the most rewrite steps: click it in the sidebar
    browser.click(f"#list .item:nth-child({2 + data['groups'].index(g)})")
    browser.wait_for(f"document.getElementById('title').textContent.includes({json.dumps(g['name'])})")
    assert browser.js("document.getElementById('src').textContent") == g["src"]
    assert browser.js("document.getElementById('uops').textContent") == g["uops"]
    assert browser.js("document.getElementById('binary').textContent") == g["binary"]
    assert browser.js("document.querySelectorAll('#rewrites details.call').length") == len(g["rewrites"])
    # open the call where the most different rules fired and click through its first steps: rule, graphs before and after
    c = max(range(len(g["rewrites"])), key=lambda i: (len({st["rule"] for st in g["rewrites"][i]["steps"]}), len(g["rewrites"][i]["steps"])))
    call = g["rewrites"][c]
    browser.click(f"#rewrites details.call[data-call='{c}'] > summary")
    browser.wait_for(f"document.querySelector(\"details.call[data-call='{c}']\").open")
    for s in range(min(3, len(call["steps"]))):
      step = call["steps"][s]
      browser.click(f"details.call[data-call='{c}'] .step[data-step='{s}']")
      browser.wait_for(f"document.querySelector('#step-view h3') && document.querySelector('#step-view h3').textContent.startsWith('step {s + 1} ')")
      shown = browser.js("[...document.querySelectorAll('#step-view .graphbox')].map((b) => [b.querySelector('.title').textContent, "
                         "b.querySelector('.node.hl').dataset.id, b.querySelectorAll('.node').length])")
      assert [x[:2] for x in shown] == [["before", str(step["before"])], ["after", str(step["after"])]]
      assert all(n >= 1 for _, _, n in shown)
      assert step["rule"] in browser.js("document.querySelector('#step-view h3').textContent")
      assert browser.js("document.querySelector('#step-view pre.pattern').textContent") == step["pattern"]
      # the highlighted node is the one the rule matched: its op is drawn
      assert browser.js("document.querySelector('#step-view .graphbox .node.hl').dataset.op") == data["nodes"][step["before"]][0]
    shots = shots_dir(tmp_path)
    browser.js("document.getElementById('rewrites').scrollIntoView()")
    browser.screenshot(shots / "viz-rewrites.png")
    # the timeline: a row per device queue, spans for every kernel launched
    browser.click("#list .item:nth-child(1)")
    browser.wait_for("!!document.getElementById('timeline')")
    rows = browser.js("[...document.querySelectorAll('#timeline .row-label')].map((e) => e.textContent)")
    assert "CPU kernels" in rows and "HOST realize" in rows and "CPU compile" in rows, rows
    launched = sorted(e["name"] for e in data["trace"]["traceEvents"] if e["ph"] == "X" and e["tid"] == next(
      m["tid"] for m in data["trace"]["traceEvents"] if m["ph"] == "M" and m["name"] == "thread_name" and m["args"]["name"] == "kernels"))
    assert sorted(browser.js("[...document.querySelectorAll('#timeline rect.ev')].map((e) => e.dataset.name)")) == sorted(
      e["name"] for e in data["trace"]["traceEvents"] if e["ph"] == "X") and launched
    browser.click("#timeline rect.ev")
    assert "us" in browser.js("document.getElementById('tl-detail').textContent")
    browser.screenshot(shots / "viz-timeline.png")
    assert (shots / "viz-rewrites.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
  finally: srv.shutdown(); srv.server_close()
  urls = browser.requested_urls()
  assert any(u.endswith("/data.json") for u in urls) and any(u.endswith("/viz.js") for u in urls)
  assert all(urlparse(u).hostname == "127.0.0.1" for u in urls), [u for u in urls if urlparse(u).hostname != "127.0.0.1"]
