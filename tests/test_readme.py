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
    written = tmp_path / "outputs" / "readme"
    assert (written / "answer" / "importance_map.png").is_file() and (written / "my_gridprobe" / "pipeline.json").is_file()
    assert os.path.getsize(written / "captioned.mp4") > 0
    # run from the repository root, the snippets leave nothing outside the git-ignored outputs/
    assert sorted(os.listdir(tmp_path)) == ["outputs"]
    # what the text says the outputs show: GridProbe answers the needle question right ...
    assert namespace["out"] is not None and "D. cross" in out and namespace["q"]["answer"] == "cross"
    # ... and the builtin Bernini plans the right layout (a medium orange heart in place) but draws a small orange blob
    # the judge reads as a circle, in place (the judge calls it wrong: issue 51)
    assert "1. orange heart, medium, accelerate" in out and "('small', 'orange', 'circle', None)" in out
    assert "white (p = " in out  # latent reasoning: the scene's answer is white
    # the VLM sampling snippet captions the one object its clip holds, and its samples differ
    samples = namespace["vlm"].generate(namespace["turn"], do_sample=True, temperature=1.0, num_return_sequences=3, generator=1)
    assert all(s.startswith("a purple star") for s in samples) and len(set(samples)) > 1, samples
