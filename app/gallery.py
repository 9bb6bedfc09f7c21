"""A static HTML gallery: sections of pictures, videos and numbers, written atomically."""

from __future__ import annotations

import html
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from core.outputs import publish_file

_STYLE = """body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#222}
section{border-top:1px solid #ddd;padding:1em 0}img,video{max-width:100%;border-radius:4px;margin:4px 0}
pre{background:#f5f5f5;padding:.6em;overflow:auto;font-size:13px}code{background:#f5f5f5;padding:0 .2em}
.pair{display:flex;flex-wrap:wrap;gap:8px;align-items:flex-start}figure{margin:0}figcaption{font-size:13px;color:#555}
p.wrong{background:#fde8e8;border-left:4px solid #c62828;padding:.4em .6em}p.right{background:#e8f5e9;border-left:4px solid #2e7d32;padding:.4em .6em}"""


@dataclass
class Section:
    title: str
    text: str = ""
    images: list[str] = field(default_factory=list)
    videos: list[str] = field(default_factory=list)
    data: dict | None = None
    command: str | None = None
    # a synthetic example's ground truth, in words and as pictures, shown beside the result; ``verdict`` says in
    # words whether the result is right ("right: ..." / "wrong: ..."), ``right`` the same as a flag (None: no truth)
    truth: str | None = None
    truth_images: list[str] = field(default_factory=list)
    verdict: str | None = None
    right: bool | None = None


class Gallery:
    """Collect sections, then ``write()`` ``root/index.html`` with media linked by relative path."""

    def __init__(self, root: str | Path, title: str = "Atelier demo"):
        self.root, self.title, self.sections = Path(root), title, []

    def add(self, section: Section) -> None:
        self.sections.append(section)

    def _rel(self, p: str) -> str:
        return html.escape(os.path.relpath(p, self.root))

    def write(self) -> Path:
        parts = [f"<!doctype html><meta charset=utf-8><title>{html.escape(self.title)}</title><style>{_STYLE}</style>",
                 f"<h1>{html.escape(self.title)}</h1>"]
        for s in self.sections:
            parts.append(f"<section><h2>{html.escape(s.title)}</h2><p>{html.escape(s.text)}</p>")
            if s.truth is not None:
                parts.append(f"<p><b>truth:</b> {html.escape(s.truth)}</p>")
            if s.verdict is not None:
                cls = "right" if s.right else "wrong"  # the verdict's words start with this same word
                parts.append(f'<p class="{cls}"><b>{cls}:</b>{html.escape(s.verdict.removeprefix(cls + ":"))}</p>')
            if s.command:
                parts.append(f"<p>reproduce: <code>{html.escape(s.command)}</code></p>")
            if s.truth_images:
                parts.append('<div class="pair">' + "".join(
                    f'<figure><img src="{self._rel(p)}" alt="truth: {html.escape(Path(p).name)}"><figcaption>truth</figcaption></figure>'
                    for p in s.truth_images) + "".join(
                    f'<figure><img src="{self._rel(p)}" alt="{html.escape(Path(p).name)}"><figcaption>result</figcaption></figure>'
                    for p in s.images) + "</div>")
            else:
                parts += [f'<img src="{self._rel(p)}" alt="{html.escape(Path(p).name)}">' for p in s.images]
            parts += [f'<video src="{self._rel(p)}" controls muted loop playsinline></video>' for p in s.videos]
            if s.data is not None:
                parts.append(f"<pre>{html.escape(json.dumps(s.data, indent=2, default=str))}</pre>")
            parts.append("</section>")
        with publish_file(self.root / "index.html") as tmp:  # recorded as ours: a later demo may replace it
            tmp.write_text("\n".join(parts) + "\n")
        return self.root / "index.html"
