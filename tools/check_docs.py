"""Check the documentation: links resolve and code runs.

    python tools/check_docs.py [FILE.md ...] [--links-only]

Pages: ``docs/**/*.md``, the top-level ``README.md`` and ``packages/*/README.md``.

- Every relative link (``[text](path)``, ``![img](path)``, ``[ref]: path``) outside code must
  point at an existing file or folder; a ``#fragment`` on a Markdown target must match one
  of its headings (GitHub's slugs), a bare ``#fragment`` one of the page's own.
- Every page under ``docs/`` must be linked from another page (no orphans).
- Every ```` ```python ```` block runs. A page's blocks run in order in one namespace (like a
  console session), in a fresh process whose working folder is an empty temporary folder.
  A block preceded by the line ``<!-- no-run -->`` is skipped: for code that needs hardware,
  files or services the checker cannot provide. Tracebacks point at the Markdown file and line.
- A block of any language preceded by the line ``<!-- file: NAME -->`` is written to NAME in
  that working folder at its place in the page's order (blocks naming the same file are
  appended to it), so a page can show a C file step by step and a later python block
  compiles and runs it.

Exit status 1 when anything fails, with every failure listed.
"""

from __future__ import annotations

import argparse
import glob
import os
import re
import subprocess
import sys
import tempfile
import textwrap
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NO_RUN = "<!-- no-run -->"
FILE_MARK = re.compile(r"^<!--\s*file:\s*([\w.+-]+)\s*-->$")
BLOCK_TIMEOUT_S = 600

FENCE = re.compile(r"^(\s*)(`{3,}|~{3,})\s*([\w+-]*)")
INLINE_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REF_LINK = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$")
CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1")
HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")


def pages(explicit: list[str]) -> list[str]:
    if explicit:
        return [os.path.abspath(p) for p in explicit]
    found = glob.glob(os.path.join(ROOT, "docs", "**", "*.md"), recursive=True)
    found += glob.glob(os.path.join(ROOT, "README.md"))
    found += glob.glob(os.path.join(ROOT, "packages", "*", "README.md"))
    return sorted(found)


class Page:
    """A Markdown file split into prose lines (for links) and fenced code blocks."""

    def __init__(self, path: str):
        self.path = path
        with open(path, encoding="utf-8") as f:
            self.lines = f.read().splitlines()
        self.prose: list[tuple[int, str]] = []  # (line number, text) outside fences
        self.blocks: list[tuple[int, str, str, bool]] = []  # (first code line, lang, code, run)
        self.files: dict[int, str] = {}  # first code line -> file name the block is written to
        fence = None
        for i, line in enumerate(self.lines, 1):
            m = FENCE.match(line)
            if fence is None:
                if m:
                    fence = (m.group(2), m.group(3).lower(), i, self._opted_out(i))
                    body: list[str] = []
                    name = self._file_name(i)
                    if name:
                        self.files[i + 1] = name
                else:
                    self.prose.append((i, line))
            elif m and m.group(2).startswith(fence[0][0]) and len(m.group(2)) >= len(fence[0]) \
                    and not m.group(3):
                self.blocks.append((fence[2] + 1, fence[1], "\n".join(body), not fence[3]))
                fence = None
            else:
                body.append(line)
        if fence is not None:
            self.blocks.append((fence[2] + 1, fence[1], "\n".join(body), False))
            self.unclosed = fence[2]
        else:
            self.unclosed = None

    def _marker(self, fence_line: int) -> str:
        for j in range(fence_line - 2, -1, -1):
            text = self.lines[j].strip()
            if text:
                return text
        return ""

    def _opted_out(self, fence_line: int) -> bool:
        return self._marker(fence_line) == NO_RUN

    def _file_name(self, fence_line: int) -> str | None:
        m = FILE_MARK.match(self._marker(fence_line))
        return m.group(1) if m else None

    def links(self):
        for n, line in self.prose:
            text = CODE_SPAN.sub("", line)
            for m in INLINE_LINK.finditer(text):
                yield n, m.group(1)
            m = REF_LINK.match(text)
            if m:
                yield n, m.group(1)

    def anchors(self) -> set[str]:
        seen: dict[str, int] = {}
        out = set()
        for _, line in self.prose:
            m = HEADING.match(line)
            if not m:
                continue
            slug = slugify(m.group(2))
            k = seen.get(slug, 0)
            seen[slug] = k + 1
            out.add(slug if k == 0 else f"{slug}-{k}")
        for _, line in self.prose:  # explicit <a id="..."> / <a name="..."> anchors
            out.update(re.findall(r"<a\s+(?:id|name)=\"([^\"]+)\"", line))
        return out


def slugify(heading: str) -> str:
    """GitHub's heading anchors: lower case, markup and punctuation dropped, spaces -> '-'."""
    text = re.sub(r"`([^`]*)`", r"\1", heading)
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = re.sub(r"<[^>]+>", "", text).strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


_page_cache: dict[str, Page] = {}


def page(path: str) -> Page:
    if path not in _page_cache:
        _page_cache[path] = Page(path)
    return _page_cache[path]


def rel(path: str) -> str:
    return os.path.relpath(path, ROOT)


def check_links(p: Page, linked: set[str]) -> list[str]:
    problems = []
    for n, target in p.links():
        if re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", target) or target.startswith("//"):
            continue  # http:, https:, mailto: ... are not checked (no network in CI)
        path, _, fragment = target.partition("#")
        where = f"{rel(p.path)}:{n}"
        if not path:
            if fragment and fragment not in p.anchors():
                problems.append(f"{where}: link to #{fragment}: no such heading on this page")
            continue
        full = os.path.normpath(os.path.join(os.path.dirname(p.path), path))
        if not os.path.exists(full):
            problems.append(f"{where}: link to {target}: {rel(full)} does not exist")
            continue
        linked.add(full)
        if fragment and full.endswith(".md") and fragment not in page(full).anchors():
            problems.append(f"{where}: link to {target}: {rel(full)} has no heading #{fragment}")
    if p.unclosed:
        problems.append(f"{rel(p.path)}:{p.unclosed}: code fence never closed")
    return problems


RUNNER = textwrap.dedent("""
    import sys, traceback
    ns = {"__name__": "__main__"}
    for path, line, code, file_name in BLOCKS:
        if file_name:  # a file the page shows: written where the blocks run
            with open(file_name, "a", encoding="utf-8") as f:
                f.write(code + "\\n")
            continue
        print(f"--- {path}:{line}", flush=True)
        try:
            exec(compile("\\n" * (line - 1) + code, path, "exec"), ns)
        except SystemExit as e:
            if e.code not in (None, 0):
                traceback.print_exc()
                print(f"BLOCK FAILED {path}:{line}", flush=True)
                sys.exit(1)
        except BaseException:
            traceback.print_exc()
            print(f"BLOCK FAILED {path}:{line}", flush=True)
            sys.exit(1)
""")


def run_blocks(p: Page) -> tuple[list[str], int, int]:
    """Run the page's python blocks; returns (problems, ran, skipped)."""
    py = [b for b in p.blocks if b[1] in ("python", "py", "python3") and b[0] not in p.files]
    todo = [(p.path, line, code, None) for line, _, code, run in py if run]
    skipped = len(py) - len(todo)
    if not todo:
        return [], 0, skipped
    # files shown on the page go in at their place among the python blocks
    steps = sorted(todo + [(p.path, line, code, p.files[line]) for line, _, code, _ in p.blocks
                           if line in p.files], key=lambda b: b[1])
    script = f"BLOCKS = {steps!r}\n{RUNNER}"
    with tempfile.TemporaryDirectory(prefix="nnplug-docs-") as tmp:
        try:
            r = subprocess.run([sys.executable, "-c", script], cwd=tmp, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, timeout=BLOCK_TIMEOUT_S * len(todo))
        except subprocess.TimeoutExpired:
            return [f"{rel(p.path)}: python blocks did not finish in "
                    f"{BLOCK_TIMEOUT_S * len(todo)} s"], len(todo), skipped
    if r.returncode == 0:
        return [], len(todo), skipped
    out = r.stdout.strip()
    failed = re.findall(r"BLOCK FAILED (\S+)", out)
    where = rel(failed[-1].rsplit(":", 1)[0]) + ":" + failed[-1].rsplit(":", 1)[1] if failed \
        else rel(p.path)
    tail = "\n".join(out.splitlines()[-25:])
    return [f"{where}: python block failed (exit {r.returncode}):\n"
            + textwrap.indent(tail, "    ")], len(todo), skipped


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="Check that doc links resolve and code runs.")
    ap.add_argument("files", nargs="*", help="Markdown files (default: docs and READMEs)")
    ap.add_argument("--links-only", action="store_true", help="do not run code blocks")
    args = ap.parse_args(argv)

    files = pages(args.files)
    problems: list[str] = []
    linked: set[str] = set()
    for path in files:
        t0 = time.perf_counter()
        p = page(path)
        problems += check_links(p, linked)
        ran = skipped = 0
        if not args.links_only:
            found, ran, skipped = run_blocks(p)
            problems += found
        print(f"{rel(path)}: {sum(1 for _ in p.links())} links, {ran} python blocks ran, "
              f"{skipped} skipped ({time.perf_counter() - t0:.1f} s)")
    if not args.files:
        docs = os.path.join(ROOT, "docs")
        for path in files:
            if path.startswith(docs + os.sep) and path not in linked \
                    and os.path.basename(path) != "index.md":
                problems.append(f"{rel(path)}: no page links to it (add it to docs/index.md)")
    if problems:
        print(f"\n{len(problems)} problem(s):", file=sys.stderr)
        for msg in problems:
            print(f"- {msg}", file=sys.stderr)
        return 1
    print(f"docs OK: {len(files)} pages")
    return 0


if __name__ == "__main__":
    sys.exit(main())
