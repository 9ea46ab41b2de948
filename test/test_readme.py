"""The README's API tour runs as written and prints what its comments say."""
import contextlib, io, re
from pathlib import Path

def test_readme_tour_runs(tmp_path, monkeypatch):
  text = (Path(__file__).resolve().parents[1] / "README.md").read_text()
  code = re.search(r"## API tour\s+```python\n(.*?)```", text, re.S).group(1)
  monkeypatch.chdir(tmp_path)  # it saves model.safetensors
  out = io.StringIO()
  with contextlib.redirect_stdout(out): exec(compile(code, "README.md", "exec"), {})
  lines = out.getvalue().splitlines()
  assert float(lines[0]) > 0                      # the loss
  assert lines[1:] == ["[2.0, 4.0, 6.0]", "10"], lines
  assert (tmp_path / "model.safetensors").stat().st_size > 8 * 26 * 26 * 10 * 4
