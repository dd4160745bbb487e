"""`nnplug new`: names, folders and what it writes (fast; the install tests are in
test_generated_packages.py)."""

import os
import re

import pytest

from nnplug.cli import main
from nnplug.scaffold import Spec, generate


@pytest.mark.parametrize("argv, message", [
    (["backend", "My-NPU"], "not a valid backend id"),
    (["backend", "9lives"], "not a valid backend id"),
    (["backend", "auto"], "is reserved"),
    (["backend", "x" * 33], "not a valid backend id"),
    (["op", "my-op"], "not a valid op type"),
    (["op", "Relu"], "standard ONNX operator"),
])
def test_bad_names_are_refused_with_the_reason(tmp_path, capsys, argv, message):
    assert main(["new", *argv, str(tmp_path / "out")]) == 1
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1
    assert not (tmp_path / "out").exists()


def test_a_non_empty_folder_is_refused(tmp_path, capsys):
    (tmp_path / "keep.txt").write_text("mine")
    assert main(["new", "backend", "mine", str(tmp_path)]) == 1
    assert "is not empty" in capsys.readouterr().err
    assert os.listdir(tmp_path) == ["keep.txt"]


def test_a_file_in_the_way_is_refused(tmp_path, capsys):
    (tmp_path / "f").write_text("")
    assert main(["new", "op", "MyOp", str(tmp_path / "f")]) == 1
    assert "not a folder" in capsys.readouterr().err


def test_an_empty_folder_is_used(tmp_path, capsys):
    assert main(["new", "backend", "mine", str(tmp_path)]) == 0
    assert (tmp_path / "pyproject.toml").is_file()
    assert "next:" in capsys.readouterr().out


def test_default_folder_is_the_distribution_name(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["new", "op", "MySwish"]) == 0
    assert (tmp_path / "nnplug-ops-myswish" / "src" / "nnplug_ops_myswish" / "op.py").is_file()


def test_usage_without_arguments(capsys):
    assert main(["new"]) == 2
    assert "backend" in capsys.readouterr().out


@pytest.mark.parametrize("kind, name, expected", [
    ("backend-python", "mine", ["pyproject.toml", "README.md", "src/nnplug_backend_mine/backend.py",
                                "tests/test_backend.py", "tests/test_conformance.py"]),
    ("backend-native", "my_npu", ["include/nnplug/backend.h",
                                  "src/nnplug_backend_my_npu/csrc/backend.c",
                                  "src/nnplug_backend_my_npu/__init__.py", "tests/test_backend.py"]),
    ("op", "MySwish", ["src/nnplug_ops_myswish/op.py", "tests/test_op.py",
                       "tests/test_conformance.py"]),
    ("op-native", "MyCOp", ["include/nnplug/custom_op.h", "src/nnplug_ops_mycop/csrc/op.c",
                            "src/nnplug_ops_mycop/reference.py", "tests/test_op.py",
                            "tests/conftest.py"]),
])
def test_templates_fill_every_placeholder(tmp_path, kind, name, expected):
    files = generate(Spec(kind, name, str(tmp_path)))
    for f in expected:
        assert f in files
    for f in files:
        text = (tmp_path / f).read_text()
        assert "@@" not in text, f"{f} has an unfilled placeholder"
    pyproject = (tmp_path / "pyproject.toml").read_text()
    group = "nnplug.ops" if kind.startswith("op") else "nnplug.backends"
    assert f'[project.entry-points."{group}"]' in pyproject


def test_generated_python_is_valid(tmp_path):
    for kind, name in (("backend-python", "a"), ("backend-native", "b"), ("op", "C"),
                       ("op-native", "D")):
        root = tmp_path / kind
        for f in generate(Spec(kind, name, str(root))):
            if f.endswith(".py"):
                compile((root / f).read_text(), f, "exec")


def test_options_may_follow_the_folder(tmp_path):
    # the form docs/cli.md shows: NAME, then the option, then DIR
    assert main(["new", "backend", "late", "--native", str(tmp_path / "b")]) == 0
    assert (tmp_path / "b" / "include" / "nnplug" / "backend.h").is_file()
    assert "[tool.hatch.build.hooks.nnplug-native]" in (tmp_path / "b" / "pyproject.toml").read_text()


def test_language_given_as_the_name_is_refused_with_the_option_to_use(tmp_path, capsys):
    assert main(["new", "backend", "native", str(tmp_path / "acmebk")]) == 1
    err = capsys.readouterr().err
    assert "--native" in err and "NAME" in err
    assert not (tmp_path / "acmebk").exists()


def test_native_op_is_a_c_package_with_the_build_hook_and_headers(tmp_path, capsys):
    assert main(["new", "op", "MyOp", "--native", str(tmp_path / "o")]) == 0
    out = capsys.readouterr().out
    assert "native custom op 'MyOp'" in out and "pip install -e ." in out
    root = tmp_path / "o"
    for f in ("include/nnplug/custom_op.h",
              "src/nnplug_ops_myop/csrc/op.c", "src/nnplug_ops_myop/reference.py",
              "tests/test_op.py", "tests/test_conformance.py", "tests/conftest.py"):
        assert (root / f).is_file(), f
    assert not list(root.glob("*.py")), "no build hook loader: the hook is a build requirement"
    pyproject = (root / "pyproject.toml").read_text()
    assert '"nnplug-build-hook>=0.1"' in pyproject
    assert 'library = "libnnplug_op_myop.so"' in pyproject  # the name op folders load
    assert '"MyOp"' in (root / "src/nnplug_ops_myop/csrc/op.c").read_text()


@pytest.mark.parametrize("kind", ["backend-python", "backend-native", "op", "op-native"])
def test_next_steps_are_the_readme_commands(tmp_path, kind):
    from nnplug.scaffold.generate import _next_steps

    spec = Spec(kind, "mine" if kind.startswith("backend") else "MyOp", str(tmp_path))
    generate(spec)
    readme = (tmp_path / "README.md").read_text()
    commands = [line.split("#")[0].strip() for line in _next_steps(spec)[1:4]]
    assert commands == ["pip install -e .", "nnplug info", "pytest"]
    for c in commands:
        assert f"\n{c} " in readme, (c, readme)
    assert not re.search(r"^pip install \.(\s|$)", readme, re.M), "a non-editable install step"


def test_a_kind_error_shows_that_kinds_usage(capsys):
    with pytest.raises(SystemExit):
        main(["new", "backend", "a", "b", "c"])
    assert "nnplug new backend" in capsys.readouterr().err


def test_authoring_guide_gives_the_printed_steps():
    from nnplug.scaffold.generate import _next_steps

    doc = os.path.join(os.path.dirname(__file__), *[".."] * 4, "docs", "authoring.md")
    if not os.path.isfile(doc):
        pytest.skip("docs/ is not next to the tests (installed copy)")
    text = open(doc).read()
    for kind, name, folder in (("backend-python", "mine", "nnplug-backend-mine"),
                               ("backend-native", "mynpu", "nnplug-backend-mynpu"),
                               ("op", "MySwish", "nnplug-ops-myswish")):
        steps = [line.split("#")[0].strip() for line in _next_steps(Spec(kind, name, folder))[:3]]
        assert "\n".join(steps) in text, (kind, steps)
