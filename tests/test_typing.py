"""Type hints, docstrings and mypy on all of lance_ops (docs/adr/0010-type-checking.md).

Two checks over every module of the package (generated protobuf code excepted):

* an AST check: every public function, class and method (name without a leading ``_``, methods of
  public classes included, ``__init__`` too but without a docstring; other dunders skipped) has a
  docstring and annotations on every parameter and the return;
* mypy (``python -m mypy`` with the ``[tool.mypy]`` settings of pyproject.toml: every function
  annotated, bodies checked) reports no error at all.

``python tests/test_typing.py`` lists what the AST check would report.
"""
from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "lance_ops"

def _modules() -> list[str]:
    """Every module of lance_ops (relative posix paths), generated protobuf code excepted."""
    return sorted(p.relative_to(PACKAGE).as_posix() for p in PACKAGE.rglob("*.py") if "_proto" not in p.parts)


def _is_public(name: str) -> bool:
    return not name.startswith("_") or name == "__init__"


def _function_gaps(node: ast.FunctionDef | ast.AsyncFunctionDef, qualname: str, method: bool) -> list[str]:
    """What ``node`` lacks: a docstring (not asked of ``__init__``), parameter or return annotations."""
    gaps = []
    decorators = {ast.unparse(d) for d in node.decorator_list}
    if "overload" in decorators or "typing.overload" in decorators:
        return []
    if any(d.endswith((".setter", ".deleter")) for d in decorators):  # the property's getter has the docstring
        return []
    if node.name != "__init__" and ast.get_docstring(node) is None:
        gaps.append(f"{qualname}: no docstring")
    params = node.args.posonlyargs + node.args.args + node.args.kwonlyargs
    if method and "staticmethod" not in decorators and params:
        params = params[1:]  # self / cls
    missing = [p.arg for p in params if p.annotation is None]
    missing += [f"*{v.arg}" for v in (node.args.vararg, node.args.kwarg) if v is not None and v.annotation is None]
    if missing:
        gaps.append(f"{qualname}: parameters without a type: {', '.join(missing)}")
    if node.returns is None:
        gaps.append(f"{qualname}: no return type")
    return gaps


def gaps_of(module: str) -> list[str]:
    """The public definitions of ``module`` (relative to lance_ops/) lacking a docstring or annotations."""
    path = PACKAGE / module
    tree = ast.parse(path.read_text(), str(path))
    gaps: list[str] = []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            if _is_public(node.name) and node.name != "__init__":
                gaps += [f"{module}:{node.lineno} {g}" for g in _function_gaps(node, node.name, False)]
        elif isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
            if ast.get_docstring(node) is None:
                gaps.append(f"{module}:{node.lineno} class {node.name}: no docstring")
            for sub in node.body:
                if isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef)) and _is_public(sub.name):
                    gaps += [f"{module}:{sub.lineno} {g}" for g in _function_gaps(sub, f"{node.name}.{sub.name}", True)]
    return gaps


@pytest.mark.parametrize("module", _modules())
def test_public_definitions_have_docstrings_and_types(module: str) -> None:
    gaps = gaps_of(module)
    assert not gaps, "public definitions without a docstring or type hints:\n" + "\n".join(gaps)


def test_the_gap_checker_sees_gaps(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The analysis itself: a made-up module with each kind of gap, and one without any."""
    (tmp_path / "m.py").write_text(
        "def f(a, b: int):\n    return a\n"
        "class C:\n    def g(self) -> int:\n        return 1\n"
        "def _private(x):\n    return x\n"
        "def ok(a: int) -> int:\n    \"\"\"Fine.\"\"\"\n    return a\n"
    )
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", tmp_path)
    gaps = gaps_of("m.py")
    assert [g.split(" ", 1)[1] for g in gaps] == [
        "f: no docstring", "f: parameters without a type: a", "f: no return type",
        "class C: no docstring", "C.g: no docstring",
    ]


_ERROR_LINE = re.compile(r"^(lance_ops/[^:]+\.pyi?):(\d+): error: (.*)$")


def _mypy_errors() -> tuple[list[tuple[str, str]], str]:
    """Run mypy as configured in pyproject.toml (the whole package); (module, error line) pairs and the output."""
    pytest.importorskip("mypy")
    proc = subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"), "--no-error-summary",
         "--show-error-codes", "--no-pretty", "--no-color-output"],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )
    if proc.returncode not in (0, 1):  # 2: mypy itself failed (bad config, crash)
        pytest.fail(f"mypy failed (exit {proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    found = []
    for line in proc.stdout.splitlines():
        m = _ERROR_LINE.match(line)
        if m:
            found.append((m.group(1)[len("lance_ops/"):], line))
    return found, proc.stdout


@pytest.mark.slow  # about 45 s CPU with a cold .mypy_cache, a few seconds when warm
def test_mypy_reports_nothing() -> None:
    errors, output = _mypy_errors()
    assert not errors, f"mypy errors ({len(errors)}):\n" + "\n".join(line for _, line in errors)


if __name__ == "__main__":  # what the AST check would report: python tests/test_typing.py
    found = {m: g for m in _modules() if (g := gaps_of(m))}
    for module_gaps in found.values():
        print("\n".join(module_gaps))
    print(f"total: {sum(len(g) for g in found.values())} gaps in {len(found)} modules")
