"""VIZ: rewrites are captured as plain data (keeping no buffer alive); the server turns a trace into columns and machine code
into disassembly; the page, in one headless Chromium session over the DevTools protocol, shows a 100-kernel run (every
view without a console error, every rewrite step on its whole graph, keys, URL, search) and a timeline of 500,000 events
(zoomed, panned, a kernel opened by clicking its span), with no request leaving 127.0.0.1."""
import base64, contextlib, gc, json, os, shutil, subprocess, sys, threading, time, urllib.request, weakref
from pathlib import Path
from urllib.parse import urlparse
import numpy as np
import pytest
from headless_chromium import Chromium
from tinycore import Tensor, trace, viz
from tinycore.codegen import PASSES
from tinycore.nn import Linear
from tinycore.nn.optim import SGD
from tinycore.schedule import buffers
from tinycore.uop import Variable, symbolic_rules
from tinycore.rewrite import graph_rewrite

ROOT = Path(__file__).resolve().parents[1]

def record(n_kernels: int) -> dict:
  """Two SGD steps of a small layer, one schedule of 12 kernels, then small kernels of new shapes until `n_kernels` were
  compiled, with VIZ's capture and the profiler on: the dump the page shows."""
  with trace.capturing() as cap, trace.profile() as prof:
    layer = Linear(9, 11)
    opt = SGD([layer.weight, layer.bias], lr=0.1)
    with Tensor.train():
      for _ in range(2):
        x = Tensor(np.random.default_rng(0).random((8, 9), dtype=np.float32))
        loss = layer(x).relu().sum()
        opt.zero_grad(); loss.backward(); opt.step()
        loss.item()
    x = Tensor(np.random.default_rng(1).random((4, 1000), dtype=np.float32)).realize()
    Tensor.realize(*[(x[:, :900 + n] * n).exp2() for n in range(1, 13)])
    n = 1
    while sum(g["kind"] == "kernel" for g in cap.groups) < n_kernels:
      y = (x[:, :n].exp() * 2 + 1).relu().realize()
      (y.sum(1) / n).tolist()
      n += 1
  return viz.dump(cap, prof)

@pytest.fixture(scope="module")
def run100() -> dict: return record(100)

# ***** the capture *****

def test_capture_records_rules_that_fired_with_graphs_before_and_after(run100):
  data = run100
  kernels = [g for g in data["groups"] if g["kind"] == "kernel"]
  assert len(kernels) >= 100 and any(g["kind"] == "schedule" and len(g["items"]) >= 12 for g in data["groups"])
  for g in kernels:
    assert g["src"] and g["uops"] and base64.b64decode(g["binary"]) and g["ast"], g["name"]
    assert data["nodes"][g["ast"][0]][0] == "SINK"
  steps = [st for g in kernels for call in g["rewrites"] for st in call["steps"] if not st["rule"].startswith("pass ")]
  assert steps, "codegen applies rules: some step must be recorded"
  for g in kernels:   # each codegen pass is a call of its own, with one step where it changed the graph, heading the calls it ran
    at = [i for i, c in enumerate(g["rewrites"]) if c["where"].startswith("pass ")]
    passes = [g["rewrites"][i] for i in at]
    assert [c["where"][5:] for c in passes] == [p.name for p in PASSES], g["name"]
    assert all(st["before"] != st["after"] for c in passes for st in c["steps"]) and passes[-1]["steps"], g["name"]
    assert all(0 <= c["inner"] and i + c["inner"] < (at + [len(g["rewrites"])])[k + 1] for k, (i, c) in enumerate(zip(at, passes))), g["name"]
  assert any(c["inner"] > 0 for g in kernels for c in g["rewrites"] if c["where"].startswith("pass "))
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

# ***** the server: loading, the timeline's columns, machine code *****

def test_load_accepts_a_dump_or_a_trace_and_refuses_other_files(tmp_path):
  with trace.profile(tmp_path / "trace.json"): (Tensor([1.0]) + 2).tolist()
  got = viz.load(tmp_path / "trace.json")
  assert got["groups"] == [] and any(e["ph"] == "X" for e in got["trace"]["traceEvents"])
  (tmp_path / "other.json").write_text("[1, 2]")
  with pytest.raises(ValueError, match="neither a VIZ dump nor a Chrome trace"): viz.load(tmp_path / "other.json")
  (tmp_path / "notes.txt").write_text("not json at all")
  with pytest.raises(ValueError, match="is not JSON"): viz.load(tmp_path / "notes.txt")
  (tmp_path / "blob.bin").write_bytes(bytes(range(256)))
  with pytest.raises(ValueError, match="is not JSON"): viz.load(tmp_path / "blob.bin")
  # a dump of version 1 kept its machine code as text: it is shown as that text
  (tmp_path / "v1.json").write_text(json.dumps({"format": "tinycore-viz", "version": 1, "nodes": [], "trace": None,
                                                "groups": [{"kind": "kernel", "name": "k", "backend": "CPU", "rewrites": [], "binary": "old text"}]}))
  assert viz.machine_code(viz.load(tmp_path / "v1.json")["groups"][0]) == "old text"

def test_cli_serves_a_saved_trace_on_localhost_and_refuses_a_file_that_is_not_json(tmp_path):
  with trace.profile(tmp_path / "trace.json"): (Tensor([1.0]) + 2).tolist()
  proc = subprocess.Popen([sys.executable, "-m", "tinycore.viz", str(tmp_path / "trace.json"), "--port", "0"], stdout=subprocess.PIPE, text=True)
  try:
    line = proc.stdout.readline()
    assert line.startswith("VIZ: open http://127.0.0.1:"), line
    with urllib.request.urlopen(line.split()[2] + "data.json", timeout=10) as r: assert json.loads(r.read())["timeline"]["spans"] > 0
    with urllib.request.urlopen(line.split()[2] + "favicon.ico", timeout=10) as r: assert r.read().startswith(b"<svg")
  finally: proc.kill(); proc.wait()
  (tmp_path / "notes.txt").write_text("hello")
  for path in (tmp_path / "notes.txt", tmp_path / "missing.json"):
    got = subprocess.run([sys.executable, "-m", "tinycore.viz", str(path)], capture_output=True, text=True, timeout=60)
    assert got.returncode == 2 and "Traceback" not in got.stderr and str(path) in got.stderr, got.stderr

def test_timeline_columns_of_a_chrome_trace():
  M = lambda what, pid, tid, **args: {"ph": "M", "name": what, "pid": pid, "tid": tid, "args": args}
  events = [M("process_name", 1, 0, name="GPU"), M("process_name", 0, 0, name="HOST"), M("thread_name", 1, 7, name="kernels"),
            M("thread_name", 0, 3, name="realize"), M("process_sort_index", 0, 0, sort_index=0), M("process_sort_index", 1, 0, sort_index=1),
            {"ph": "X", "pid": 1, "tid": 7, "name": "b", "ts": 130.0, "dur": 5.0, "args": {"n": 2}},
            {"ph": "X", "pid": 1, "tid": 7, "name": "a", "ts": 110.0, "dur": 10.0, "args": {}},
            {"ph": "X", "pid": 0, "tid": 3, "name": "run", "ts": 100.0, "dur": 50.0},
            {"ph": "X", "pid": 0, "tid": 3, "name": "inner", "ts": 100.0, "dur": 5.0},
            {"ph": "s", "id": 1, "pid": 1, "tid": 7, "ts": 110.0}, {"ph": "f", "id": 1, "pid": 1, "tid": 7, "ts": 130.0, "bp": "e"},
            {"ph": "s", "id": 2, "pid": 1, "tid": 7, "ts": 110.0},   # its end was never recorded: no arrow
            {"ph": "C", "pid": 1, "name": "memory", "ts": 140.0, "args": {"bytes": 64}}, {"ph": "C", "pid": 1, "name": "memory", "ts": 120.0, "args": {"bytes": 32}}]
  meta, body, spans = viz.timeline({"traceEvents": events})
  assert [(t["device"], t["queue"], t["start"], t["end"]) for t in meta["tracks"]] == [("HOST", "realize", 0, 2), ("GPU", "kernels", 2, 4)]
  assert [s["name"] for s in spans] == ["run", "inner", "a", "b"], "by track, then start, the longer first"
  n, f, c = meta["spans"], meta["flows"], meta["counter_points"]
  assert (n, f, c) == (4, 1, 2) and meta["t0"] == 100.0 and meta["end"] == 50.0
  cols = np.frombuffer(body, np.float64, 2 * n + 2 * c)
  assert cols[:n].tolist() == [0.0, 0.0, 10.0, 30.0] and cols[n:2 * n].tolist() == [50.0, 5.0, 10.0, 5.0]
  assert cols[2 * n:].tolist() == [20.0, 40.0, 32.0, 64.0], "counter times, then values, in time order"
  ints = np.frombuffer(body, np.uint32, offset=8 * (2 * n + 2 * c))
  assert [meta["names"][i] for i in ints[:n]] == ["run", "inner", "a", "b"] and ints[n:].tolist() == [2, 3], "the arrow from a to b"
  assert meta["counters"] == [{"device": "GPU", "name": "memory", "bytes": True, "start": 0, "end": 2, "max": 64.0}]
  with pytest.raises(ValueError, match="Chrome's trace format requires"): viz.timeline({"traceEvents": [{"ph": "X", "pid": 1, "tid": 2}]})
  empty, body, _ = viz.timeline(None)
  assert (empty["spans"], empty["flows"], empty["end"], body) == (0, 0, 0.0, b"")

def test_machine_code_is_disassembled_where_the_backend_can(run100):
  kernel = next(g for g in run100["groups"] if g["kind"] == "kernel")
  code = viz.machine_code(kernel)
  if shutil.which("llvm-objdump") or shutil.which("llvm-objdump-19") or shutil.which("objdump"):
    assert f"<{kernel['name']}>:" in code and "Disassembly of section" in code, code[:500]
  else: assert "bytes of machine code" in code
  # AMD: its own disassembler, from the code object our assembler built
  from tinycore.runtime.device import Device
  from tinycore.codegen import get_program
  from tinycore.schedule import create_schedule
  ast = create_schedule([(Tensor([1.0, 2.0], device="PYTHON") * 3).uop])[0][-1].ast
  asm = Device.specs["AMD"].assembler(Device.renderer("AMD"))
  binary = asm.assemble(get_program(ast, Device.renderer("AMD"), "k").src)
  code = viz.machine_code({"kind": "kernel", "backend": "AMD", "binary": base64.b64encode(binary).decode()})
  assert code.splitlines()[-1].endswith("s_endpgm") and "global_store" in code, code
  # NV: CUDA's cuobjdump on the cubin where it is installed, else a hex dump that says so
  binary = Device.specs["NV"].assembler(Device.renderer("NV")).assemble(get_program(ast, Device.renderer("NV"), "k").src)
  code = viz.machine_code({"kind": "kernel", "backend": "NV", "binary": base64.b64encode(binary).decode()})
  assert ("Function : k" in code) if shutil.which("cuobjdump") else code.startswith(f"{len(binary)} bytes of machine code (NV has no disassembler here)"), code[:300]
  # text stays text; bytes no backend can read are a hex dump that says why
  assert viz.machine_code({"backend": "WEBGPU", "binary": base64.b64encode(b"fn main() {}\n").decode()}) == "fn main() {}\n"
  hexed = viz.machine_code({"backend": "NOSUCH", "binary": base64.b64encode(bytes(range(40))).decode()})
  assert hexed.startswith("40 bytes of machine code") and "00 01 02 03" in hexed

# ***** the page in a real browser: one Chromium for every test *****

@pytest.fixture(scope="module")
def browser(tmp_path_factory):
  b = Chromium(tmp_path_factory.mktemp("chromium-profile"), ["--disable-gpu", "--window-size=1400,1000"])
  yield b
  b.close()

@contextlib.contextmanager
def page(browser: Chromium, data: dict, hash: str = ""):
  """`data` served on 127.0.0.1 and opened; yields the page's URL. No console error may happen, no request leave 127.0.0.1."""
  srv = viz.server(data, 0)
  threading.Thread(target=srv.serve_forever, daemon=True).start()
  browser.events.clear()
  try:
    url = f"http://127.0.0.1:{srv.server_address[1]}/"
    st = time.perf_counter()
    browser.send("Page.navigate", session=True, url=url + hash)
    assert browser.wait_for("document.body && document.body.dataset.ready", timeout=120) == "1"
    print(f"page ready in {time.perf_counter() - st:.2f}s")
    yield url
    assert browser.errors() == []
    urls = browser.requested_urls()
    assert all(urlparse(u).hostname == "127.0.0.1" for u in urls), [u for u in urls if urlparse(u).hostname != "127.0.0.1"]
  finally:
    browser.send("Page.navigate", session=True, url="about:blank")
    srv.shutdown(); srv.server_close()

def shots_dir(tmp_path: Path) -> Path:
  """Screenshots go to tmp_path; UPDATE_SCREENSHOTS=1 writes the README's copies in docs/images instead."""
  return ROOT / "docs" / "images" if os.environ.get("UPDATE_SCREENSHOTS") else tmp_path

def title(browser: Chromium) -> str: return browser.js("document.getElementById('title').textContent")

def wait_title(browser: Chromium, text: str) -> None:
  try: browser.wait_for(f"document.getElementById('title') && document.getElementById('title').textContent.includes({json.dumps(text)})")
  except TimeoutError as e: raise AssertionError(f"the page shows {title(browser)!r}, not {text!r}; its errors: {browser.errors()}") from e

def test_every_view_of_a_100_kernel_run_shows_whole_graphs(browser, run100, tmp_path):
  data = run100
  with page(browser, data) as url:
    assert browser.js("document.body.innerText").count("NaN") == 0
    assert any(u.endswith("/favicon.svg") for u in browser.requested_urls())
    # every schedule lists every kernel it made, each opening that kernel
    scheds = [g for g in data["groups"] if g["kind"] == "schedule"]
    got = browser.js("[...document.querySelectorAll('#list .item.schedule')].map((e) => e.nextElementSibling.querySelectorAll('.item').length)")
    assert got == [len(g["items"]) for g in scheds] and max(got) >= 12
    # every view: no console error (checked when the page closes); each kernel's every step replays onto its whole graph:
    # the rule's node is in the graph before it, and after the last step the graph is the one the rewrite returned
    for i, g in enumerate(data["groups"]):   # shown directly: Chromium throttles a page navigating 200 times in 10 s
      browser.js(f"(viz.data.groups[{i}].kind === 'kernel' ? showKernel : showSchedule)({i}, {{}})")
      assert title(browser).startswith(f"kernel {g['name']} on " if g["kind"] == "kernel" else "schedule "), (i, title(browser))
    check = browser.js("""(() => { const out = {steps: 0, bad: []};
      viz.data.groups.forEach((g, gi) => g.kind === 'kernel' && g.rewrites.forEach((c, ci) => {
        for (let s = 1; s <= c.steps.length; s++) { const sh = stepGraph(g, ci, s); out.steps++; if (!sh.found) out.bad.push([g.name, ci, s]); }
        if (callSinks(c)(c.steps.length) !== viz.nodes.canon[c.output]) out.bad.push([g.name, ci, 'output']); }));
      return out; })()""", timeout=120)
    assert check["bad"] == [] and check["steps"] == sum(len(c["steps"]) for g in data["groups"] if g["kind"] == "kernel" for c in g["rewrites"])
    # the kernel with the most steps, through the page: its rewrites, source, UOps and disassembly
    gi = max((i for i, g in enumerate(data["groups"]) if g["kind"] == "kernel"), key=lambda i: sum(len(c["steps"]) for c in data["groups"][i]["rewrites"]))
    g = data["groups"][gi]
    first = next(i for i, k in enumerate(data["groups"]) if k["kind"] == "kernel" and i != gi)
    browser.js(f"location.hash = 'g={first}'")
    wait_title(browser, data["groups"][first]["name"])
    assert browser.js("document.getElementById('main').scrollTop = 400, document.getElementById('main').scrollTop") > 0
    item = f"#list .item.kernel[data-hash='g={gi}']"
    if browser.js(f"document.querySelector(\"{item}\").parentElement.classList.contains('closed')"):   # many schedules start folded
      browser.js(f"document.querySelector(\"{item}\").parentElement.previousElementSibling.querySelector('.kind').id = 'unfold'")
      browser.click("#unfold")
    browser.click(item)
    wait_title(browser, g["name"])
    assert browser.js("document.getElementById('main').scrollTop") == 0, "a new item starts at the top"
    assert browser.js("document.getElementById('src').textContent") == g["src"]
    assert browser.js("document.getElementById('uops').textContent") == g["uops"]
    browser.wait_for("document.getElementById('binary').dataset.ready")
    assert browser.js("document.getElementById('binary').textContent") == viz.machine_code(g)
    # the keys step through every step of the changing rewrites, in order; the URL follows; each graph is the whole graph
    order = [(c, s) for c, call in enumerate(g["rewrites"]) if call["steps"] or call["where"].startswith("pass ") for s in range(len(call["steps"]) + 1)]
    assert browser.js("[viz.shown.c, viz.shown.s]") == list(order[0])
    for want in order[1:40]:
      browser.key("j")
      assert browser.js("[viz.shown.c, viz.shown.s]") == list(want)
      browser.wait_for(f"location.hash === '#g={gi}&c={want[0]}&s={want[1]}'")
      shown = browser.js("[viz.graph.box.dataset.nodes, viz.shown.ids.length, viz.nodes.reach(viz.shown.root).size, Object.values(viz.shown.marks)]")
      assert int(shown[0]) == shown[1] == shown[2] and (want[1] == 0 or "hl" in shown[3])
    browser.key("ArrowUp")
    assert browser.js("[viz.shown.c, viz.shown.s]") == list(order[38])
    # a pass is one step: the whole kernel before and after it
    c = next(c for c, call in enumerate(g["rewrites"]) if call["where"].startswith("pass ") and call["steps"])
    browser.js(f"location.hash = 'g={gi}&c={c}&s=1'")
    browser.wait_for(f"viz.shown.c === {c} && viz.shown.s === 1")
    out = g["rewrites"][c]["output"]
    assert browser.js("viz.shown.root") == browser.js(f"viz.nodes.canon[{out}]")
    assert browser.js("viz.shown.ids.length") == len(reachable(data["nodes"], out))
    browser.key("b")
    assert browser.js("[viz.shown.before, viz.shown.ids.length, Object.values(viz.shown.marks)]") == [True, len(reachable(data["nodes"], g["rewrites"][c]["input"])), ["matched"]]
    browser.key("b")
    # a step in the middle of a rewrite: the URL names it, and a reload comes back to it
    c, call = next((c, call) for c, call in enumerate(g["rewrites"]) if len(call["steps"]) >= 3 and not call["where"].startswith("pass "))
    browser.js(f"location.hash = 'g={gi}&c={c}&s=2'")
    browser.wait_for(f"viz.shown.c === {c} && viz.shown.s === 2")
    browser.screenshot(shots_dir(tmp_path) / "viz-rewrites.png")
    browser.wait_for(f"location.hash === '#g={gi}&c={c}&s=2'")
    browser.send("Page.reload", session=True)
    browser.wait_for(f"document.body && document.body.dataset.ready && viz.shown && viz.shown.c === {c} && viz.shown.s === 2")
    assert title(browser) == f"kernel {g['name']} on {g['device']}"
    # the graph zooms with the wheel around the pointer, and a click on a node names it
    box = browser.js("(() => { const r = viz.graph.canvas.getBoundingClientRect(); return [r.x + r.width / 2, r.y + r.height / 2]; })()")
    scale = browser.js("viz.graph.scale")
    browser.mouse("mouseWheel", *box, deltaX=0, deltaY=-300)
    assert browser.js("viz.graph.scale") > scale
    node = browser.js("viz.shown.root")
    x, y = browser.js(f"viz.graph.focus({node}), viz.graph.clientCenter({node})")
    for kind in ("mousePressed", "mouseReleased"): browser.mouse(kind, x, y, button="left", clickCount=1)
    assert browser.js("viz.graph.info.textContent").startswith(f"%{node} SINK")
    # search: only the kernels whose names match stay listed; Enter opens the first
    other = next(k for k in data["groups"] if k["kind"] == "kernel" and k["name"].startswith("r_"))
    browser.js("document.getElementById('search').focus()")
    browser.send("Input.insertText", session=True, text=other["name"])
    shown = browser.js("[...document.querySelectorAll('#list .item.kernel:not(.hidden)')].map((e) => e.textContent.replace(/^\\d+/, ''))")
    assert shown and all(other["name"] in s for s in shown)
    browser.key("Enter")
    wait_title(browser, other["name"])
    browser.key("Escape")
    assert browser.js("document.querySelectorAll('#list .item.kernel.hidden').length") == 0
    # a schedule: all its kernels, and the graph of each
    si = next(i for i, s in enumerate(data["groups"]) if s["kind"] == "schedule" and len(s["items"]) >= 12)
    browser.js(f"location.hash = 'g={si}'")
    wait_title(browser, "schedule")
    assert browser.js("document.querySelectorAll('#items .step').length") == len(data["groups"][si]["items"])
    browser.key("j"); browser.key("j")
    assert browser.js("viz.shown.item") == 2
    browser.wait_for(f"location.hash === '#g={si}&i=2'")
    assert int(browser.js("document.querySelector('#step-view .graphbox').dataset.nodes")) == len(reachable(data["nodes"], data["groups"][si]["items"][2]))

def reachable(nodes: list, root: int) -> set[int]:
  seen, stack = {root}, [root]
  while stack:
    for s in nodes[stack.pop()][3]:
      if s not in seen: seen.add(s); stack.append(s)
  return seen

def test_timeline_of_a_training_run_opens_a_kernel_from_its_span(browser, run100, tmp_path):
  data = run100
  with page(browser, data, "#timeline"):
    tracks = browser.js("viz.timeline.meta.tracks.map((t) => `${t.device} ${t.queue}`)")
    assert {"CPU kernels", "HOST realize", "CPU compile"} <= set(tracks)
    spans = [e for e in data["trace"]["traceEvents"] if e["ph"] == "X"]
    assert browser.js("viz.timeline.meta.spans") == len(spans) and browser.js("viz.timeline.meta.flows") > 0
    # the README's picture: the last 24 launches, one of them selected (its arrows dark)
    browser.js("(() => { const t = viz.timeline, k = t.meta.tracks.find((r) => r.queue === 'kernels'), a = Math.max(k.start, k.end - 24), b = k.end - 1;"
               " t.selected = b - 6; t.setView(t.ts[a] - 2, t.ts[b] + t.dur[b] + 2); })()")
    assert browser.js("new Promise((ok) => requestAnimationFrame(() => ok(+viz.timeline.canvas.dataset.drawn)))") > 0
    browser.screenshot(shots_dir(tmp_path) / "viz-timeline.png")
    # a kernel's link to its first launch zooms the timeline there; a click on that span opens the kernel again
    gi = next(i for i, g in enumerate(data["groups"]) if g["kind"] == "kernel")
    browser.js(f"location.hash = 'g={gi}'")
    wait_title(browser, data["groups"][gi]["name"])
    browser.click(".meta a[href^='#timeline&span=']")
    browser.wait_for("!!document.getElementById('tl-canvas') && viz.timeline.selected >= 0")
    span = browser.js("viz.timeline.selected")
    box = browser.js(f"viz.timeline.spanClientBox({span})")
    assert box and box["w"] >= 2
    for kind in ("mousePressed", "mouseReleased"): browser.mouse(kind, box["x"] + box["w"] / 2, box["y"] + box["h"] / 2, button="left", clickCount=1)
    wait_title(browser, data["groups"][gi]["name"])
    # back on the timeline, a span that is not a kernel's shows its details
    browser.send("Page.navigate", session=True, url=browser.js("location.href.split('#')[0]") + "#timeline")
    browser.wait_for("!!document.getElementById('tl-canvas')")
    run = browser.js("(() => { const t = viz.timeline, n = t.meta.names.indexOf('run'); for (let i = 0; i < t.meta.spans; i++) if (t.name[i] === n) return i; })()")
    browser.js(f"viz.timeline.show({run})")
    box = browser.js(f"new Promise((ok) => requestAnimationFrame(() => ok(viz.timeline.spanClientBox({run}))))")
    for kind in ("mousePressed", "mouseReleased"): browser.mouse(kind, box["x"] + 5, box["y"] + box["h"] / 2, button="left", clickCount=1)
    browser.wait_for("document.getElementById('tl-detail').textContent.includes('items')")

def synthetic_trace(data: dict, n_events: int) -> dict:
  """`data` with its timeline made n_events long: launches of its kernels, one after another on the CPU kernels queue, an
  arrow from each to the next and a memory point at each (a third of the events each), after the run's own events."""
  tr = data["trace"]
  pid, tid = next((e["pid"], e["tid"]) for e in tr["traceEvents"] if e["ph"] == "M" and e["name"] == "thread_name" and e["args"]["name"] == "kernels")
  names = [g["name"] for g in data["groups"] if g["kind"] == "kernel"]
  t = max(e["ts"] + e.get("dur", 0) for e in tr["traceEvents"] if "ts" in e) + 100.0
  out = list(tr["traceEvents"])
  for i in range((n_events - len(out)) // 4 + 1):
    dur = 5.0 + (i * 7919) % 40
    out.append({"ph": "X", "pid": pid, "tid": tid, "name": names[i % len(names)], "ts": t, "dur": dur, "args": {"n": i}})
    out.append({"ph": "s", "id": 10**7 + i, "pid": pid, "tid": tid, "ts": t, "name": "dependency", "cat": "dependency"})
    out.append({"ph": "f", "bp": "e", "id": 10**7 + i, "pid": pid, "tid": tid, "ts": t + dur + 3.0, "name": "dependency", "cat": "dependency"})
    out.append({"ph": "C", "pid": pid, "name": "memory", "ts": t, "args": {"bytes": (i * 4096) % 10**7}})
    t += dur + 3.0
  return {**data, "trace": {**tr, "traceEvents": out}}

def test_timeline_of_500k_events_zooms_pans_and_opens_a_kernel(browser, run100):
  data = synthetic_trace(run100, 500_000)
  assert len(data["trace"]["traceEvents"]) >= 500_000
  with page(browser, data, "#timeline") as url:
    assert browser.js("document.body.innerText").count("NaN") == 0
    whole = browser.js("viz.timeline.view")
    end = browser.js("viz.timeline.end")
    assert whole[0] <= 0 and whole[1] >= end and int(browser.js("viz.timeline.canvas.dataset.drawn")) > 0
    print(f"500k events: first draw {browser.js('viz.timeline.drawMs'):.1f} ms")
    # the wheel zooms in around the pointer: on a kernel launch near the middle of the run
    k = browser.js("(() => { const t = viz.timeline, mid = t.end * 0.6; for (let i = 0; i < t.meta.spans; i++) if (t.ts[i] > mid && viz.kernelOfSpan(i) !== null && t.meta.tracks[t.trackOf[i]].queue === 'kernels') return i; })()")
    at = lambda: browser.js(f"(() => {{ const t = viz.timeline, r = t.canvas.getBoundingClientRect(); return [r.left + t.x(t.ts[{k}] + t.dur[{k}] / 2), r.top + t.trackY[t.trackOf[{k}]] + 6]; }})()")
    for _ in range(40):
      if (box := browser.js(f"viz.timeline.spanClientBox({k})")) and box["w"] >= 8: break
      before = browser.js("viz.timeline.view")
      browser.mouse("mouseWheel", *at(), deltaX=0, deltaY=-500)
      browser.wait_for(f"viz.timeline.view[1] - viz.timeline.view[0] < {before[1] - before[0]}")
    assert box and box["w"] >= 8, "zoomed in to the kernel's span"
    view = browser.js("viz.timeline.view")
    assert view[1] - view[0] < (whole[1] - whole[0]) / 1000
    browser.wait_for("location.hash.includes('&from=')")   # the URL keeps the range
    # drag pans by the distance dragged, keeping the width; keys zoom and pan too; 0 shows the whole run again
    x, y = at()
    browser.mouse("mousePressed", x, y, button="left", clickCount=1)
    browser.mouse("mouseMoved", x - 200, y, button="left", buttons=1)
    browser.mouse("mouseReleased", x - 200, y, button="left", clickCount=1)
    moved = browser.js("viz.timeline.view")
    assert moved[0] > view[0] and abs((moved[1] - moved[0]) - (view[1] - view[0])) < 1e-6 * (view[1] - view[0])
    browser.key("d")
    assert browser.js("viz.timeline.view[0]") > moved[0]
    browser.key("w")
    assert browser.js("viz.timeline.view[1] - viz.timeline.view[0]") < moved[1] - moved[0]
    browser.key("0")
    assert browser.js("viz.timeline.view") == whole
    # a click on the kernel's span opens the kernel
    browser.js(f"viz.timeline.show({k})")
    box = browser.js(f"new Promise((ok) => requestAnimationFrame(() => ok(viz.timeline.spanClientBox({k}))))")
    for kind in ("mousePressed", "mouseReleased"): browser.mouse(kind, box["x"] + box["w"] / 2, box["y"] + box["h"] / 2, button="left", clickCount=1)
    name = browser.js(f"viz.timeline.meta.names[viz.timeline.name[{k}]]")
    wait_title(browser, name)
    assert browser.js("location.hash").startswith("#g=")

def test_an_empty_run_and_a_trace_alone(browser, tmp_path):
  for data in (viz.dump(None, None), viz.dump(trace.Capture(), trace.Profile())):
    with page(browser, data):
      assert title(browser) == "nothing was recorded" and "NaN" not in browser.js("document.body.innerText")
  with trace.profile() as prof: (Tensor([1.0, 2.0]) * 5).tolist()
  with page(browser, viz.dump(None, prof)):
    browser.wait_for("!!document.getElementById('tl-canvas')")
    assert browser.js("document.getElementById('tl-status').textContent").startswith("timeline: ")
    assert "NaN" not in browser.js("document.body.innerText")
