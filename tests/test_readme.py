"""The README's Python snippets run as written (in a scratch folder, in order, sharing one namespace).
Snippets that name a downloaded checkpoint under /models/ cannot run offline and are skipped."""

import os
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.usefixtures("one_thread")


def snippets() -> list[str]:
    return re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), flags=re.S)


def test_readme_python_snippets_run(tmp_path, monkeypatch, capsys):
    blocks = snippets()
    runnable = [b for b in blocks if "/models/" not in b]
    assert len(runnable) >= 3 and len(blocks) - len(runnable) <= 1
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    for block in runnable:
        exec(compile(block, "README.md", "exec"), namespace)
    out = capsys.readouterr().out
    assert "answer:" in out and "compute:" in out
    assert (tmp_path / "answer" / "importance_map.png").is_file() and (tmp_path / "my_gridprobe" / "pipeline.json").is_file()
    assert os.path.getsize(tmp_path / "captioned.mp4") > 0
