"""The human and JSON report: collects each test's outcome by section, with the op, dtype and shape it checked."""
from __future__ import annotations
import json, os
from collections import Counter, defaultdict
from dataclasses import dataclass, asdict
from tinycore_conformance import SECTIONS

@dataclass
class Result:
  nodeid: str
  section: str
  outcome: str        # passed, failed, skipped, error
  op: str = ""
  dtype: str = ""
  shape: str = ""
  message: str = ""   # the failure's first line, or the skip's reason
  seconds: float = 0.0

def _message(report) -> str:
  lr = report.longrepr
  if lr is None: return ""
  if isinstance(lr, tuple): return str(lr[2]).removeprefix("Skipped: ")
  crash = getattr(lr, "reprcrash", None)
  text = crash.message if crash is not None else str(lr).strip().splitlines()[-1]
  return text.removeprefix("AssertionError: ")

EVENTS_ENV = "TINYCORE_CONFORMANCE_EVENTS"   # the file the pytest process appends its events to, one JSON object a line

class EventWriter:
  """The pytest side (a plugin object): every collection error, test start and phase report, flushed as it happens,
  so the CLI can tell which test was running if the backend takes the process down."""
  def __init__(self, path: str): self.f = open(path, "a", buffering=1)
  def emit(self, **event) -> None: self.f.write(json.dumps(event) + "\n")
  def pytest_collectreport(self, report) -> None:
    if report.failed: self.emit(event="collect_error", nodeid=report.nodeid, message=_message(report))
  def pytest_runtest_logstart(self, nodeid, location) -> None: self.emit(event="start", nodeid=nodeid)
  def pytest_runtest_logreport(self, report) -> None:
    self.emit(event="report", nodeid=report.nodeid, when=report.when, outcome=report.outcome, message=_message(report),
              section=next((s for s in SECTIONS if s in report.keywords), "other"), props=dict(report.user_properties),
              seconds=getattr(report, "duration", 0.0))

def pytest_configure(config) -> None:
  """Loaded with -p tinycore_conformance.report by the CLI: write events where the CLI asked."""
  if (path := os.environ.get(EVENTS_ENV)): config.pluginmanager.register(EventWriter(path), "tinycore-conformance-events")

def pytest_collection_modifyitems(config, items) -> None:
  """After a crash the CLI starts pytest again: tests that already have a result (and the one that crashed) are left out."""
  if not (path := os.environ.get(EVENTS_ENV)) or not os.path.getsize(path): return
  with open(path) as f: done = {e["nodeid"] for line in f if (e := _parse(line)) is not None and e["event"] != "collect_error"}
  keep = [it for it in items if it.nodeid not in done]
  if len(keep) < len(items):
    config.hook.pytest_deselected(items=[it for it in items if it.nodeid in done])
    items[:] = keep

def _parse(line: str) -> dict | None:
  try: return json.loads(line)
  except json.JSONDecodeError: return None   # a line cut short by a crash

class Collector:
  """The CLI side: results rebuilt from the events file, a crash charged to the test that was running."""
  def __init__(self):
    self.results: dict[str, Result] = {}
    self.collect_errors: list[str] = []
    self.seconds = 0.0

  def load(self, path: str, seconds: float) -> str | None:
    """Read the events; returns the test that was running when the events stop (the one a crash happened in), if any."""
    self.results.clear(); self.collect_errors.clear()
    self.seconds, running = seconds, None
    with open(path) as f:
      for e in filter(None, map(_parse, f)):
        if e["event"] == "collect_error": self.collect_errors.append(f"{e['nodeid']}: {e['message']}")
        elif e["event"] == "start": running = e["nodeid"]
        elif e["event"] == "crash":
          r = self.results.setdefault(e["nodeid"], Result(e["nodeid"], "other", "passed"))
          r.outcome, r.message = "error", f"the test process died (exit code {e['exit_code']}) while this test ran: the backend crashed it"
          running = None
        else:
          self.add(e)
          if e["when"] == "teardown": running = None
    return running

  def add(self, e: dict) -> None:
    props = e["props"]
    r = self.results.setdefault(e["nodeid"], Result(e["nodeid"], e["section"], "passed"))
    r.op, r.dtype, r.shape = props.get("op", r.op), props.get("dtype", r.dtype), props.get("shape", r.shape)
    r.seconds += e["seconds"]
    if e["outcome"] == "skipped" and r.outcome == "passed": r.outcome, r.message = "skipped", e["message"]
    elif e["outcome"] == "failed" and r.outcome not in ("failed", "error"):
      r.outcome, r.message = ("failed" if e["when"] == "call" else "error"), e["message"]

  def summary(self) -> dict[str, Counter]:
    rows: dict[str, Counter] = {s: Counter() for s in SECTIONS}
    for r in self.results.values():
      row = rows.setdefault(r.section, Counter())
      row[r.outcome] += 1
      row["seconds"] += r.seconds
    return rows

  def failures(self) -> list[Result]: return [r for r in self.results.values() if r.outcome in ("failed", "error")]
  def skips(self) -> list[Result]: return [r for r in self.results.values() if r.outcome == "skipped"]

  def as_json(self, device: str, info: dict) -> dict:
    return {"device": device, **info, "seconds": round(self.seconds, 2),
            "sections": {s: {k: round(v, 2) if k == "seconds" else v for k, v in c.items()} for s, c in self.summary().items()},
            "failures": [asdict(r) for r in self.failures()], "skips": [asdict(r) for r in self.skips()],
            "collection_errors": self.collect_errors}

def _what(r: Result) -> str: return " ".join(x for x in (r.op, r.dtype, r.shape) if x)

def format_report(c: Collector, device: str, info: dict, skips_per_reason: int | None = 40) -> str:
  """The table by section, every failure with what it checked, and the skips grouped by reason (at most
  `skips_per_reason` named per reason; None names all of them; the JSON report always has every one)."""
  lines = [f"tinycore conformance: {device} ({info.get('package', '?')} {info.get('version', '?')}), profile {info.get('profile', '?')}, "
           f"{len(c.results)} tests in {c.seconds:.1f} s", f"plugin module under test: {info.get('module', '?')}",
           *info.get("contract_lines", []), "",
           f"{'section':<11}{'passed':>8}{'failed':>8}{'skipped':>9}{'seconds':>9}"]
  total: Counter = Counter()
  for section, counts in c.summary().items():
    failed = counts["failed"] + counts["error"]
    lines.append(f"{section:<11}{counts['passed']:>8}{failed:>8}{counts['skipped']:>9}{counts['seconds']:>9.1f}")
    total.update(counts)
  lines.append(f"{'total':<11}{total['passed']:>8}{total['failed'] + total['error']:>8}{total['skipped']:>9}{total['seconds']:>9.1f}")
  if c.collect_errors: lines += ["", f"COLLECTION ERRORS ({len(c.collect_errors)})"] + [f"  {e}" for e in c.collect_errors]
  if (fails := c.failures()):
    lines += ["", f"FAILURES ({len(fails)})"]
    for r in sorted(fails, key=lambda r: (list(SECTIONS).index(r.section) if r.section in SECTIONS else 99, r.op, r.dtype)):
      lines.append(f"  [{r.section}] {_what(r)}: {r.message}")
      lines.append(f"      {r.nodeid}")
  if (skips := c.skips()):
    by_reason: dict[str, list[Result]] = defaultdict(list)
    for r in skips: by_reason[r.message].append(r)
    lines += ["", f"SKIPS ({len(skips)}, by reason)"]
    for reason, rs in sorted(by_reason.items(), key=lambda kv: -len(kv[1])):
      lines.append(f"  {reason} ({len(rs)}):")
      shown = rs if skips_per_reason is None else rs[:skips_per_reason]
      more = f"; ... and {len(rs) - len(shown)} more (--all-skips or --json lists them)" if len(shown) < len(rs) else ""
      lines.append("      " + "; ".join(f"[{r.section}] {_what(r)}" for r in shown) + more)
  return "\n".join(lines)
