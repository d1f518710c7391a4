"""Every relative link in the repository's Markdown reaches a file, and a `#fragment` into a Markdown
file reaches one of its headings. Pages move (docs/autoscaler.md's benchmark half became
docs/autoscale-benchmark.md) and a link that dangles is found by a reader, not by CI, otherwise."""

from __future__ import annotations

import functools
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
LINK = re.compile(r"\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)


def markdown_files() -> list[Path]:
    """The project's pages: not those of tools' hidden folders (`.pytest_cache`'s README came and went
    with the cache, and the suite's test count with it), dependencies or the demo's output."""
    skip = {"node_modules", "demo-out"}
    return sorted(p for p in ROOT.rglob("*.md")
                  if not any(part in skip or part.startswith(".") for part in p.relative_to(ROOT).parts[:-1]))


def github_slug(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation but `-` and `_` dropped, spaces to
    hyphens (`anchors` adds the explicit `<a id="…">` ones)."""
    text = re.sub(r"[`*]", "", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


@functools.cache  # a page's headings, read once however many links point into it
def anchors(path: Path) -> frozenset[str]:
    body = FENCE.sub("", path.read_text(encoding="utf-8"))
    seen: dict[str, int] = {}
    out = set()
    for line in body.splitlines():
        m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not m:
            continue
        slug = github_slug(m.group(1))
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else f"{slug}-{n}")
    return frozenset(out | set(re.findall(r'<a\s+(?:id|name)="([^"]+)"', body)))


def broken_links(path: Path) -> list[str]:
    body = FENCE.sub("", path.read_text(encoding="utf-8"))
    bad = []
    for target in LINK.findall(body):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        file_part, _, fragment = target.partition("#")
        dest = (path.parent / file_part).resolve() if file_part else path
        if not dest.exists():
            bad.append(f"{target}: no such file")
        elif fragment and dest.suffix == ".md" and fragment not in anchors(dest):
            bad.append(f"{target}: no heading #{fragment} in {dest.name}")
    return bad


def test_markdown_files_are_found() -> None:
    names = {p.relative_to(ROOT).as_posix() for p in markdown_files()}
    assert {"README.md", "docs/autoscaler.md", "docs/architecture.md"} <= names


@pytest.mark.parametrize("path", markdown_files(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_relative_links_resolve(path: Path) -> None:
    assert broken_links(path) == []


def test_a_dangling_link_and_a_missing_heading_are_reported(tmp_path: Path) -> None:
    (tmp_path / "a.md").write_text("# Surges: queue timeouts and standing headroom\n\n## Twice\n\n## Twice\n"
                                    '<a id="by-hand"></a>\n')
    page = tmp_path / "b.md"
    page.write_text("[ok](a.md#surges-queue-timeouts-and-standing-headroom) [ok](a.md#twice-1) [ok](a.md#by-hand) "
                    "[gone](gone.md) [bad](a.md#nowhere) [web](https://example.com/x.md)\n"
                    "```\n[in a fence](nothing.md)\n```\n")
    assert broken_links(page) == ["gone.md: no such file", "a.md#nowhere: no heading #nowhere in a.md"]
