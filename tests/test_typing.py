"""Type hints, docstrings and mypy on lance_ops (docs/adr/0010-type-checking.md).

Two checks, both as a ratchet over :data:`CHECKED` (the modules already finished):

* an AST check: every public function, class and method (name without a leading ``_``, methods of
  public classes included, ``__init__`` too but without a docstring; other dunders skipped) has a
  docstring and annotations on every parameter and the return;
* mypy (``python -m mypy`` with the ``[tool.mypy]`` settings of pyproject.toml) reports no error
  located in a checked module.

Modules outside CHECKED are still to do: ``python tests/test_typing.py`` lists them with their
gaps. Their total number of AST gaps may only go down (:data:`TODO_GAPS_MAX`). When a module is
finished, add it to CHECKED; once every module is there, the mypy test covers all of lance_ops.
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

#: finished modules, relative to lance_ops/; an entry ending in "/" covers that whole directory
CHECKED = {
    "io/",
    "__init__.py",
    "_version.py",
    "api.py",
    "cli.py",
    "cli_output.py",
    "demo.py",
    "errors.py",
    "file.py",
    "format/version.py",
    "schema.py",
    "spark/__init__.py",
    "spark/_common.py",
    "maintenance/__init__.py",
    "maintenance/compaction/",
    "maintenance/cleanup/",
    "maintenance/health.py",
    "maintenance/rowid_index.py",
    "maintenance/staged_commit.py",
    "maintenance/verify.py",
    "spark/_tasks.py",
    "table/filters/__init__.py",
    "table/filters/parse.py",
    "table/filters/projection.py",
    "table/filters/pruning.py",
    "table/filters/values.py",
    "table/stats/__init__.py",
    "table/stats/fragments.py",
    "table/stats/prune.py",
    "table/stats/store.py",
    "table/commit/__init__.py",
    "table/indices.py",
    "table/commit/hooks.py",
    "table/commit/properties.py",
    "table/manifest/__init__.py",
    "table/scan.py",
    "maintenance/statistics.py",
    "table/__init__.py",
    "table/blobs.py",
    "table/dataset.py",
    "table/delete.py",
    "table/filters/sql.py",
    "table/fragment.py",
    "table/index_files.py",
    "table/rowid_lookup.py",
    "table/snapshot.py",
    "table/stats/collect.py",
    "table/write.py",
}

#: AST gaps (missing docstrings or annotations) left outside CHECKED; lower it as modules are done
TODO_GAPS_MAX = 391


def _modules() -> list[str]:
    """Every module of lance_ops (relative posix paths), generated protobuf code excepted."""
    return sorted(p.relative_to(PACKAGE).as_posix() for p in PACKAGE.rglob("*.py") if "_proto" not in p.parts)


def _is_checked(module: str) -> bool:
    return any(module == entry or (entry.endswith("/") and module.startswith(entry)) for entry in CHECKED)


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


def still_to_do() -> dict[str, list[str]]:
    """Modules outside CHECKED, each with its gaps (an empty list: ready to be added to CHECKED)."""
    return {m: gaps_of(m) for m in _modules() if not _is_checked(m)}


def test_checked_entries_exist() -> None:
    """A moved or removed module must be renamed here too, or CHECKED silently covers less."""
    modules = _modules()
    stale = [e for e in CHECKED if not any(m == e or (e.endswith("/") and m.startswith(e)) for m in modules)]
    assert not stale, f"CHECKED names modules that do not exist: {sorted(stale)}"


@pytest.mark.parametrize("module", [m for m in _modules() if _is_checked(m)])
def test_public_definitions_have_docstrings_and_types(module: str) -> None:
    gaps = gaps_of(module)
    assert not gaps, "public definitions without a docstring or type hints:\n" + "\n".join(gaps)


def test_gaps_outside_checked_only_go_down() -> None:
    todo = still_to_do()
    total = sum(len(g) for g in todo.values())
    assert total <= TODO_GAPS_MAX, (
        f"{total} docstring/annotation gaps outside CHECKED (at most {TODO_GAPS_MAX}): new public code needs "
        f"type hints and a docstring. By module:\n"
        + "\n".join(f"  {m}: {len(g)}" for m, g in todo.items() if g))


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
def test_mypy_reports_nothing_in_checked_modules() -> None:
    errors, _ = _mypy_errors()
    ours = [line for module, line in errors if _is_checked(module)]
    elsewhere = len(errors) - len(ours)
    assert not ours, (f"mypy errors in CHECKED modules ({elsewhere} more elsewhere, still to do):\n"
                      + "\n".join(ours))


if __name__ == "__main__":  # the to-do list: python tests/test_typing.py
    todo = still_to_do()
    for name, module_gaps in todo.items():
        print(f"{name}: {len(module_gaps)} gaps" if module_gaps else f"{name}: clean (add it to CHECKED)")
    print(f"total: {sum(len(g) for g in todo.values())} gaps in {len(todo)} modules outside CHECKED")
