"""`tinycore-conformance NAME`: run the suite against one backend in a child pytest and print a report (and optionally JSON)."""
from __future__ import annotations
import argparse, json, os, subprocess, sys, tempfile, time
from tinycore_conformance import SECTIONS
from tinycore_conformance.report import EVENTS_ENV, Collector, format_report

MAX_CRASHES = 5   # restarts after the backend takes the test process down

def parse(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
  p = argparse.ArgumentParser(prog="tinycore-conformance", description="Check a tinycore backend against the shared conformance suite.",
                              epilog="Arguments after `--` go to pytest unchanged (e.g. -- -x --tb=long).")
  p.add_argument("device", help="the backend's device name, as `tinycore devices` lists it (e.g. CPU, PYTHON)")
  p.add_argument("--json", metavar="PATH", help="also write the report as JSON to PATH")
  p.add_argument("--profile", choices=("ci", "vendor"), default="ci",
                 help="ci: fixed seeds, few random graphs (default); vendor: many more random graphs, fresh seeds")
  p.add_argument("--fuzz-programs", type=int, metavar="N", help="random programs per test of the fuzz section (vendor: as many as you like)")
  p.add_argument("--section", action="append", choices=sorted(SECTIONS), help="run only this section (repeatable)")
  p.add_argument("-k", dest="keyword", help="pytest -k expression selecting tests by name (e.g. 'add and float16')")
  p.add_argument("-m", dest="markexpr", help="pytest -m marker expression (the sections are markers)")
  p.add_argument("-q", "--quiet", action="store_true", help="less pytest output: progress dots and failures, then the report")
  p.add_argument("--all-skips", action="store_true", help="name every skipped test in the report (default: 40 per reason)")
  if "--" in argv: argv, extra = argv[:argv.index("--")], argv[argv.index("--") + 1:]
  else: extra = []
  return p.parse_args(argv), extra

def pytest_args(args: argparse.Namespace, extra: list[str]) -> list[str]:
  out = ["--pyargs", "tinycore_conformance", "--device", args.device, "--conformance-profile", args.profile,
         "-p", "no:cacheprovider", "-p", "tinycore_conformance.report", "--tb=short", "-q" if not args.quiet else "-qq"]
  if os.environ.get("PYTEST_DISABLE_PLUGIN_AUTOLOAD"): out += ["-p", "tinycore_conformance.plugin"]
  if args.fuzz_programs is not None: out += ["--fuzz-programs", str(args.fuzz_programs)]
  marks = [f"({args.markexpr})"] if args.markexpr else []
  if args.section: marks.append("(" + " or ".join(args.section) + ")")
  if marks: out += ["-m", " and ".join(marks)]
  if args.keyword: out += ["-k", args.keyword]
  return out + extra

def main(argv: list[str] | None = None) -> int:
  args, extra = parse(sys.argv[1:] if argv is None else argv)
  from tinycore.runtime.device import Device
  name = Device.canonicalize(args.device).split(":")[0]
  if name not in Device.specs:
    print(f"tinycore-conformance: no backend named {name!r}; installed: {sorted(Device.specs)}" +
          (f"\n  plugin errors: {Device.errors}" if Device.errors else ""), file=sys.stderr)
    return 2
  spec = Device.specs[name]
  from tinycore.runtime.plugin import version_str
  from tinycore_conformance.target import PIN_ENV, contract_lines
  # pytest runs in a child process: a backend that crashes the interpreter still gets a report naming the test it crashed
  # in, and pytest starts again on the tests that have no result yet (up to MAX_CRASHES times)
  with tempfile.TemporaryDirectory() as tmp:
    events = os.path.join(tmp, "events.jsonl")
    open(events, "w").close()
    start, collector = time.perf_counter(), Collector()
    for _ in range(MAX_CRASHES + 1):
      rc = subprocess.run([sys.executable, "-m", "pytest", *pytest_args(args, extra)], env={**os.environ, EVENTS_ENV: events, PIN_ENV: f"{name}={spec.module}"}).returncode
      crashed_in = collector.load(events, time.perf_counter() - start)
      if crashed_in is None or rc in (0, 1, 2, 5): break
      with open(events, "a") as f: f.write(json.dumps({"event": "crash", "nodeid": crashed_in, "exit_code": rc}) + "\n")
      print(f"\ntinycore-conformance: the test process died (exit code {rc}) in {crashed_in}; continuing with the remaining tests", flush=True)
    collector.load(events, time.perf_counter() - start)
  info = {"package": spec.package, "version": spec.version, "module": spec.module, "profile": args.profile, "pytest_exit": rc,
          "contract": version_str(spec.contract_run_as), "contract_stated": version_str(spec.contract_version),
          "contract_status": spec.contract_status, "contract_note": spec.contract_note, "contract_lines": contract_lines(spec)}
  print("\n" + format_report(collector, name, info, None if args.all_skips else 40))
  if args.json:
    with open(args.json, "w") as f: json.dump(collector.as_json(name, info), f, indent=1)
  if collector.failures() or collector.collect_errors: return 1
  return 0 if rc in (0, 5) and collector.results else rc or 1

if __name__ == "__main__":
  sys.exit(main())
