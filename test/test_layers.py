"""The core's imports point down the layers drawn in docs/architecture.md: no import upward, no circle, none inside a function."""
import ast, functools, re
from pathlib import Path
import importlib.metadata
import pytest

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "tinycore"

def drawn_layers() -> dict[str, int]:
  """module name -> layer, read from the picture in docs/architecture.md (`├─ N name ─` headers, `│  path  job` rows)."""
  layers, layer = {}, None
  for line in (ROOT / "docs" / "architecture.md").read_text().splitlines():
    if m := re.match(r"[┌├]─ (\d+) ", line): layer = int(m.group(1))
    elif (m := re.match(r"│\s+(\S+\.py)\s+\S", line)) and layer is not None:
      assert m.group(1) not in layers, f"{m.group(1)} is drawn twice in docs/architecture.md"
      layers[m.group(1)] = layer
  return {module_name(path): n for path, n in layers.items()}

def module_name(path: str) -> str:
  parts = ["tinycore", *path.removesuffix(".py").split("/")]
  return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)

def package_files() -> dict[str, Path]:
  return {module_name(str(f.relative_to(PKG))): f for f in sorted(PKG.rglob("*.py"))}

def _is_type_checking(node: ast.If) -> bool:
  return isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING" or isinstance(node.test, ast.Attribute) and node.test.attr == "TYPE_CHECKING"

def imports(path: Path, mod: str, modules: set[str]) -> list[tuple[str, int, bool]]:
  """(imported tinycore module, line, inside a function) for every import the module runs (not those under TYPE_CHECKING)."""
  out: list[tuple[str, int, bool]] = []
  is_pkg = path.name == "__init__.py"
  def resolve(base: str, level: int) -> str:
    if level == 0: return base
    anchor = mod.split(".")[:len(mod.split(".")) - level + (1 if is_pkg else 0)]
    return ".".join(anchor + ([base] if base else []))
  def visit(node: ast.AST, in_function: bool) -> None:
    if isinstance(node, ast.If) and _is_type_checking(node):
      for n in node.orelse: visit(n, in_function)
      return
    if isinstance(node, ast.Import):
      out.extend((a.name, node.lineno, in_function) for a in node.names if a.name.split(".")[0] == "tinycore")
    elif isinstance(node, ast.ImportFrom):
      base = resolve(node.module or "", node.level)
      if base.split(".")[0] == "tinycore":  # `from tinycore.x import y` names the module tinycore.x.y when y is one
        out.extend((f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base, node.lineno, in_function) for a in node.names)
    for child in ast.iter_child_nodes(node):
      visit(child, in_function or isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)))
  visit(ast.parse(path.read_text(), str(path)), False)
  return out

@functools.cache
def import_graph() -> dict[str, list[tuple[str, int, bool]]]:
  files = package_files()
  return {mod: imports(path, mod, set(files)) for mod, path in files.items()}

def test_every_module_is_drawn_in_the_layer_picture():
  drawn, files = drawn_layers(), package_files()
  assert not set(files) - set(drawn), f"add these files to the layer picture in docs/architecture.md: {sorted(set(files) - set(drawn))}"
  assert not set(drawn) - set(files), f"the layer picture in docs/architecture.md names files that do not exist: {sorted(set(drawn) - set(files))}"

def problems(graph: dict[str, list[tuple[str, int, bool]]], layer: dict[str, int]) -> list[str]:
  bad = []
  for mod, deps in graph.items():
    for dep, line, in_function in deps:
      if dep not in layer: bad.append(f"{mod}:{line} imports {dep}, which is no module of tinycore")
      elif in_function: bad.append(f"{mod}:{line} imports {dep} inside a function: import at the top (a circle is fixed by moving names)")
      elif layer[mod] < layer[dep]: bad.append(f"{mod}:{line} (layer {layer[mod]}) imports {dep} from a layer above it ({layer[dep]})")
  return bad

def circle(graph: dict[str, list[tuple[str, int, bool]]]) -> list[str] | None:
  """One import circle (as a path that ends where it starts), or None: a depth-first walk that meets its own path."""
  done: set[str] = set()
  for root in graph:
    path, stack = [root], [iter(sorted({d for d, _, _ in graph[root]}))]
    while stack:
      nxt = next(stack[-1], None)
      if nxt is None: done.add(path.pop()); stack.pop()
      elif nxt in path: return path[path.index(nxt):] + [nxt]
      elif nxt not in done and nxt in graph: path.append(nxt); stack.append(iter(sorted({d for d, _, _ in graph[nxt]})))
  return None

def test_imports_point_down_and_sit_at_the_top():
  assert not (bad := problems(import_graph(), drawn_layers())), "\n".join(bad)

def test_no_import_circle():
  assert (c := circle(import_graph())) is None, "import circle: " + " -> ".join(c)

def test_the_checks_catch_an_upward_import_a_local_import_and_a_circle(tmp_path):
  """The checks above on made-up modules, so they are known to fail when they should."""
  f = tmp_path / "m.py"
  f.write_text("from tinycore.b import B\nif TYPE_CHECKING: from tinycore.c import C\ndef g():\n  from tinycore import c\n")
  graph = {"tinycore.a": imports(f, "tinycore.a", {"tinycore.a", "tinycore.b", "tinycore.c"}), "tinycore.b": [("tinycore.c", 1, False)],
           "tinycore.c": [("tinycore.a", 1, False)]}
  assert graph["tinycore.a"] == [("tinycore.b", 1, False), ("tinycore.c", 4, True)]
  bad = problems(graph, {"tinycore.a": 0, "tinycore.b": 1, "tinycore.c": 0})
  assert len(bad) == 2 and "layer above" in bad[0] and "inside a function" in bad[1]  # b -> c goes down, c -> a stays in layer 0
  assert circle(graph) == ["tinycore.a", "tinycore.b", "tinycore.c", "tinycore.a"]
  assert circle({"tinycore.a": [("tinycore.b", 1, False)], "tinycore.b": []}) is None

def test_builtin_devices_register_through_the_entry_point():
  """PYTHON and NULL come from tinycore's own entry in the plugin group, not from an import in the registry."""
  eps = [ep for ep in importlib.metadata.entry_points(group="tinycore.backends") if ep.value == "tinycore.runtime.builtin"]
  assert eps, "tinycore's entry point for its built-in devices is missing: reinstall the core (pip install -e .)"
  assert eps[0].dist.metadata["Name"] == "tinycore"
