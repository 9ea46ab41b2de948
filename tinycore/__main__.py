"""The `tinycore` command: `tinycore devices [--json]` lists every registered backend, where it comes from and whether it opens here."""
from __future__ import annotations
import argparse, json, sys, warnings
from tinycore.runtime.device import Device
from tinycore.runtime.plugin import CONTRACT_VERSION, SUPPORTED, version_str

def devices(as_json: bool) -> int:
  with warnings.catch_warnings():  # broken plugins are rows of the listing, not warnings on top of it
    warnings.simplefilter("ignore")
    rows = Device.listing()
    try: default = Device.DEFAULT
    except Exception: default = None
  for r in rows: r["default"] = r["name"] == default
  if as_json:
    print(json.dumps({"contract_version": version_str(CONTRACT_VERSION), "contract_supported": [version_str(v) for v in SUPPORTED],
                      "default": default, "devices": rows}, indent=2))
    return 0
  head = ("device", "package", "version", "contract", "instances", "opens", "runs on", "module", "error or warning")
  status = {"adapted": "adapted (deprecated)"}
  table = [(r["name"] + (" *" if r["default"] else ""), r["package"], r["version"],
            "?" if r["contract"] is None else f"{r['contract']} {status.get(r['contract_status'], r['contract_status'])}",
            "?" if r["instances"] is None else str(r["instances"]), "yes" if r["opens"] else "no", r["runs_on"] or "-", r["module"],
            r["error"] or r["contract_note"]) for r in rows]
  widths = [max(len(x[i]) for x in [head, *table]) for i in range(len(head) - 1)]
  for line in [head, *table]: print("  ".join(c.ljust(w) for c, w in zip(line, widths)) + "  " + line[-1])
  print(f"\nplugin contract {version_str(CONTRACT_VERSION)} (plugins for {version_str(SUPPORTED[0])} to {version_str(SUPPORTED[1])} run; older "
        f"majors adapted, deprecated); * marks the default device ({default or 'none opens'}); pick another with DEV=NAME")
  return 0

def main(argv: list[str] | None = None) -> int:
  ap = argparse.ArgumentParser(prog="tinycore", description=__doc__)
  sub = ap.add_subparsers(dest="command", required=True)
  dev = sub.add_parser("devices", help="list every registered backend: package, version, contract version, whether it opens, and why not")
  dev.add_argument("--json", action="store_true", help="machine-readable output")
  args = ap.parse_args(argv)
  return devices(args.json)

if __name__ == "__main__": sys.exit(main())
