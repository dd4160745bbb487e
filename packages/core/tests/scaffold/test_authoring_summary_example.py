"""docs/authoring.md shows the conformance summary of the unmodified native backend template:
it is what the suite prints for it, not a hand-written table. The test generates the package,
compiles its backend, runs the whole suite on the library and compares the doc's block with
the summary printed (the library's folder shown as `...`). NNPLUG_UPDATE_DOCS=1 rewrites the
block from this run instead."""

import os
import re
import shutil
import subprocess

import pytest

import nnplug
from nnplug.scaffold import Spec, generate
from nnplug_conformance import run_conformance

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler")]

DOC = os.path.join(os.path.dirname(__file__), *[".."] * 4, "docs", "authoring.md")
MARK = "<!-- summary: written by packages/core/tests/scaffold/test_authoring_summary_example.py"
_STATS = re.compile(r"\b(passed|failed|skipped|errors?|warnings?)\b.* in [\d.]+s")
BLOCK = re.compile(re.escape(MARK) + r"[^\n]*\n```\n(.*?)```", re.S)


def _printed_summary(stdout: str, folder: str) -> str:
    lines = stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if "nnplug conformance summary" in line)
    out = []
    for line in lines[start:]:
        if out and (line.startswith("==") or _STATS.search(line)):  # pytest's own lines
            break
        out.append(line.replace(folder, "..."))
    return "\n".join(out) + "\n"


def test_authoring_summary_example_is_what_the_suite_prints(tmp_path, monkeypatch):
    if not os.path.isfile(DOC):
        pytest.skip("docs/ is not next to the tests (installed copy)")
    pkg = tmp_path / "nnplug-backend-mynpu"
    generate(Spec("backend-native", "mynpu", str(pkg)))
    src = pkg / "src" / "nnplug_backend_mynpu"
    lib = src / "libnnplug_backend_mynpu.so"  # where the editable install builds it
    subprocess.run([shutil.which("cc"), "-O2", "-std=c11", "-fPIC", "-shared",
                    "-fvisibility=hidden", f"-I{nnplug.get_include()}", str(src / "csrc" / "backend.c"),
                    "-o", str(lib), "-lm"], check=True, capture_output=True, text=True)
    monkeypatch.setenv("COLUMNS", "80")  # pytest's separator width
    result = run_conformance(backend_path=str(lib), cwd=str(tmp_path), timeout=900)
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-2000:]
    printed = _printed_summary(result.stdout, str(src))
    text = open(DOC).read()
    match = BLOCK.search(text)
    assert match, f"{DOC} has no generated summary block ({MARK} ...)"
    if os.environ.get("NNPLUG_UPDATE_DOCS") == "1":
        with open(DOC, "w") as f:
            f.write(text[:match.start(1)] + printed + text[match.end(1):])
        return
    assert match.group(1) == printed, (
        "docs/authoring.md's summary is not what the suite prints now; rerun this test with "
        f"NNPLUG_UPDATE_DOCS=1 to rewrite it. Printed:\n{printed}")
