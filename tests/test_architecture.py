"""The layer rule and the no-cycle rule of docs/architecture.md, read from lance_ops' import graph.

Every ``import`` / ``from ... import`` in lance_ops (at module level *and* inside functions) is an
edge, and so is the step into each package whose ``__init__`` such an import runs. An edge may not run up the floors, and modules may not import each other in a loop.

The redesign step removes today's violations; until then they are listed in ``KNOWN_*`` below as a
ratchet: a violation not on the list fails the suite (new code cannot add one), and a listed one
that is gone fails too (so the list only shrinks and stays true).
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "lance_ops"

#: floor of each top-level part of lance_ops (docs/architecture.md); the package face is above all
FLOORS = {
    "errors": 0, "_proto": 0, "_version": 0,
    "io": 1, "schema": 1,
    "format": 2,
    "table": 3,
    "maintenance": 4,
    "spark": 5, "cli": 5, "cli_output": 5, "cli_file": 5, "demo": 5,
    "api": 9,  # the package face (ADR 0003): composes maintenance verbs onto the core dataset
    "file": 9,  # the public face mirroring pylance's ``lance.file`` (ADR 0002): re-exports lance_ops.format
    "optimize": 9,  # the public face mirroring pylance's ``lance.optimize`` (ADR 0015)
}

#: upward edges that exist today (importer -> imported); the redesign removes them
KNOWN_UPWARD: set[tuple[str, str]] = set()

#: import cycles that exist today (each as the sorted modules of one strongly connected component)
KNOWN_CYCLES: set[tuple[str, ...]] = set()


def module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in PACKAGE.rglob("*.py") if "_proto" not in p.parts}


def imports_of(name: str, path: Path, known: set[str]) -> set[str]:
    """lance_ops modules ``name`` imports anywhere in its file (``from pkg import mod`` counts as mod)."""
    tree = ast.parse(path.read_text(), str(path))
    is_package = path.name == "__init__.py"
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".") if is_package else name.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                prefix = ".".join(base + ([node.module] if node.module else []))
            else:
                prefix = node.module or ""
            targets = [f"{prefix}.{a.name}" if f"{prefix}.{a.name}" in known else prefix for a in node.names]
        else:
            continue
        for target in targets:
            if target.startswith("lance_ops._proto"):  # generated code: floor 0, imports nothing of ours
                continue
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name and target.startswith("lance_ops"):
                out.add(target)
    # importing a.b.c first runs the packages a.b (and a) it lives in: an edge to each of them,
    # except to the importer's own packages (already being imported when it runs)
    own = {".".join(name.split(".")[:i]) for i in range(1, name.count(".") + 1)}
    for target in list(out):
        parts = target.split(".")
        for i in range(2, len(parts)):
            package = ".".join(parts[:i])
            if package in known and package not in own and package != name:
                out.add(package)
    return out


def graph() -> dict[str, set[str]]:
    mods = modules()
    known = set(mods)
    return {name: imports_of(name, path, known) for name, path in mods.items()}


def floor(name: str) -> int | None:
    parts = name.split(".")
    if len(parts) == 1:  # the package face stands above every floor
        return None
    return FLOORS.get(parts[1])


def strongly_connected(g: dict[str, set[str]]) -> list[set[str]]:
    """Tarjan's algorithm, iterative."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    out: list[set[str]] = []
    counter = 0
    for root in g:
        if root in index:
            continue
        work = [(root, iter(sorted(g[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in g:
                    continue
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(g[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    top = stack.pop()
                    on_stack.discard(top)
                    component.add(top)
                    if top == node:
                        break
                if len(component) > 1:
                    out.append(component)
    return out


def test_every_part_has_a_floor():
    unplaced = sorted({n.split(".")[1] for n in modules() if "." in n and floor(n) is None})
    assert not unplaced, f"add these parts of lance_ops to FLOORS (docs/architecture.md): {unplaced}"


def test_imports_never_run_up_the_floors():
    upward = set()
    for importer, targets in graph().items():
        f = floor(importer)
        if f is None:
            continue
        upward |= {(importer, t) for t in targets if floor(t) is not None and floor(t) > f}
    assert upward - KNOWN_UPWARD == set(), "imports from a lower floor to a higher one (docs/architecture.md)"
    assert KNOWN_UPWARD - upward == set(), "these are gone: remove them from KNOWN_UPWARD"


def test_no_import_cycles():
    cycles = {tuple(sorted(c)) for c in strongly_connected(graph())}
    new = cycles - KNOWN_CYCLES
    assert not new, f"modules that import each other in a loop: {sorted(new)}"
    assert KNOWN_CYCLES - cycles == set(), "these cycles are gone (or changed): update KNOWN_CYCLES"


def test_the_checker_sees_cycles_and_upward_edges():
    """The analysis itself: a made-up graph with one loop and one upward edge."""
    g = {"lance_ops.table.a": {"lance_ops.table.b"}, "lance_ops.table.b": {"lance_ops.table.a"},
         "lance_ops.io.c": {"lance_ops.table.a"}}
    assert [sorted(c) for c in strongly_connected(g)] == [["lance_ops.table.a", "lance_ops.table.b"]]
    assert floor("lance_ops.io.c") < floor("lance_ops.table.a")


# --- rule 3: no private attribute of a dataset or fragment outside their modules (ADR 0004) -------
#: the modules that own LanceDataset and LanceFragment (they may use each other's internals)
ACCESSOR_OWNERS = {"lance_ops/table/dataset.py": "LanceDataset", "lance_ops/table/fragment.py": "LanceFragment"}
#: the trees whose modules must use the public accessors
ACCESSOR_USERS = ("lance_ops", "lance_ops_airflow", "operators", "sensors", "dags")


def private_members(source: str, class_name: str) -> set[str]:
    """``_name`` members of class ``class_name``: its methods/properties and the ``self._x`` it uses."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if not (isinstance(node, ast.ClassDef) and node.name == class_name):
            continue
        for n in ast.walk(node):
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
                name = n.name
            elif isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "self":
                name = n.attr
            else:
                continue
            if name.startswith("_") and not name.startswith("__"):
                names.add(name)
    return names


def private_uses(source: str, private: set[str]) -> list[tuple[int, str]]:
    """(line, text) of each ``X._name`` (X not ``self``/``cls``) or ``getattr(X, "_name")`` in ``source``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and node.attr in private:
            if not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")):
                found.append((node.lineno, ast.unparse(node)))
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
              and node.func.id in ("getattr", "hasattr", "setattr") and len(node.args) >= 2
              and isinstance(node.args[1], ast.Constant) and node.args[1].value in private):
            found.append((node.lineno, ast.unparse(node)))
    return found


def test_no_private_dataset_or_fragment_attribute_outside_their_modules():
    private: set[str] = set()
    for rel, cls in ACCESSOR_OWNERS.items():
        members = private_members((ROOT / rel).read_text(), cls)
        assert members, f"{cls} not found in {rel}: update ACCESSOR_OWNERS"
        private |= members
    assert {"_store", "_base", "_manifest_file", "_dataset"} <= private  # the checker sees them
    bad = []
    for top in ACCESSOR_USERS:
        for path in sorted((ROOT / top).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if rel in ACCESSOR_OWNERS:
                continue
            bad += [f"{rel}:{line}: {text}" for line, text in private_uses(path.read_text(), private)]
    assert not bad, "use the public accessors of LanceDataset/LanceFragment (ADR 0004):\n" + "\n".join(bad)


def test_the_private_use_checker_sees_uses():
    """The analysis itself: a made-up class and a module that reaches into it."""
    members = private_members("class D:\n    def _scan(self): return self._store\n", "D")
    assert members == {"_scan", "_store"}
    uses = private_uses("def f(ds, self):\n    ds._scan(); self._store; getattr(ds, '_store'); ds.store\n", members)
    assert sorted(text for _, text in uses) == ["ds._scan", "getattr(ds, '_store')"]


# --- no test switch in production code (docs/adr/0007-fault-injection-from-tests.md) ------------

#: words that mark an environment variable or Spark local property as a test-only switch (whole
#: words between underscores or dots, so LATEST_VERSION is not one)
TEST_SWITCH_WORDS = re.compile(r"(^|[_.])(TESTS?|TESTING|FAIL_FIRST|INJECT[A-Z]*|CRASH[A-Z]*)([_.]|$)")
#: production code: the package plus the Airflow parts shipped in the image
PRODUCTION_DIRS = ("lance_ops", "lance_ops_airflow", "operators", "sensors", "dags")


def _string_constants(tree: ast.Module) -> dict[str, str]:
    """Module-level ``NAME = "text"`` assignments."""
    return {t.id: node.value.value for node in tree.body if isinstance(node, ast.Assign)
            and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)
            for t in node.targets if isinstance(t, ast.Name)}


def setting_reads(source: str, constants: dict[str, str]) -> list[tuple[int, str]]:
    """(line, name) of every environment variable or Spark local property ``source`` reads, in order.

    Names given as constants (of this module, or ``constants`` of the others) are resolved; names
    that cannot be resolved statically read as "?".
    """
    tree = ast.parse(source)
    known = {**constants, **_string_constants(tree)}

    def name_of(expr: ast.expr) -> str:
        if isinstance(expr, ast.Constant) and isinstance(expr.value, str):
            return expr.value
        if isinstance(expr, ast.Name | ast.Attribute):
            return known.get(expr.id if isinstance(expr, ast.Name) else expr.attr, "?")
        if isinstance(expr, ast.JoinedStr):
            return "".join(v.value if isinstance(v, ast.Constant) else "?" for v in expr.values)
        return "?"

    def is_environ(expr: ast.expr) -> bool:
        return (isinstance(expr, ast.Attribute) and expr.attr == "environ") or \
            (isinstance(expr, ast.Name) and expr.id == "environ")

    out = []
    for node in ast.walk(tree):
        key = None
        if isinstance(node, ast.Call) and node.args:
            f = node.func
            if isinstance(f, ast.Attribute) and f.attr in ("get", "pop", "setdefault") and is_environ(f.value):
                key = node.args[0]
            elif (isinstance(f, ast.Attribute) and f.attr in ("getenv", "getLocalProperty")) or \
                    (isinstance(f, ast.Name) and f.id == "getenv"):
                key = node.args[0]
        elif isinstance(node, ast.Subscript) and is_environ(node.value):
            key = node.slice
        elif isinstance(node, ast.Compare) and any(is_environ(c) for c in node.comparators):
            key = node.left
        if key is not None:
            out.append((node.lineno, node.col_offset, name_of(key)))
    return [(line, name) for line, _, name in sorted(out)]


def switch_names_in(source: str, constants: dict[str, str]) -> list[str]:
    """Test-switch names ``source`` reads, or holds as an ALL_CAPS literal (names read in a loop)."""
    def is_switch(name: str) -> bool:
        return TEST_SWITCH_WORDS.search(name.upper()) is not None

    found = [name for _, name in setting_reads(source, constants) if is_switch(name)]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and \
                node.value.isupper() and " " not in node.value and is_switch(node.value):
            found.append(node.value)
    return sorted(set(found))


def test_no_test_switch_in_production_code():
    files = [p for d in PRODUCTION_DIRS for p in (ROOT / d).rglob("*.py") if "_proto" not in p.parts]
    constants: dict[str, str] = {}
    for path in files:
        constants.update(_string_constants(ast.parse(path.read_text(), str(path))))
    switches = {str(p.relative_to(ROOT)): names for p in files
                if (names := switch_names_in(p.read_text(), constants))}
    assert switches == {}, "production code reads test-only switches; inject faults from the tests (ADR 0007)"


def test_the_switch_checker_sees_every_way_of_reading_a_setting():
    """The analysis itself: literals, constants, os.getenv, environ[...], ``in``, local properties."""
    source = '''
import os
from os import environ, getenv
FLAG = "X_FAIL_FIRST_ATTEMPT"
a = os.environ.get("LANCE_OPS_TEST_MODE")
b = os.getenv(FLAG)
c = environ["INJECT_FAULTS"]
d = "SIMULATE_CRASH" in os.environ
e = ctx.getLocalProperty(other.CRASH_AFTER_WRITE) or ctx.getLocalProperty("lance_ops.tests.fail_first")
f = os.environ.get("LANCE_OPS_DECODE_THREADS", "4") or os.environ.get("LATEST_VERSION")
g = getenv(f"LANCE_OPS_{kind}")
for name in ("AWS_TEST_SECRET",):
    os.environ.get(name)
'''
    reads = setting_reads(source, {"CRASH_AFTER_WRITE": "LANCE_OPS_CRASH_AFTER_WRITE"})
    assert [name for _, name in reads] == [
        "LANCE_OPS_TEST_MODE", "X_FAIL_FIRST_ATTEMPT", "INJECT_FAULTS", "SIMULATE_CRASH",
        "LANCE_OPS_CRASH_AFTER_WRITE", "lance_ops.tests.fail_first", "LANCE_OPS_DECODE_THREADS",
        "LATEST_VERSION", "LANCE_OPS_?", "?",
    ]
    assert switch_names_in(source, {"CRASH_AFTER_WRITE": "LANCE_OPS_CRASH_AFTER_WRITE"}) == [
        "AWS_TEST_SECRET", "INJECT_FAULTS", "LANCE_OPS_CRASH_AFTER_WRITE", "LANCE_OPS_TEST_MODE",
        "SIMULATE_CRASH", "X_FAIL_FIRST_ATTEMPT", "lance_ops.tests.fail_first",
    ]


# --- file format versions are FileVersion members, not strings (ADR 0002) -------------------------
#: spellings of file format versions; only lance_ops/format/version.py may compare text against them
VERSION_LITERALS = {"0.1", "2.0", "2.1", "2.2", "2.3", "legacy", "stable", "next"}
#: the one module that turns version text into FileVersion members
VERSION_PARSER = "lance_ops/format/version.py"


def version_string_comparisons(source: str) -> list[tuple[int, str]]:
    """(line, text) of each ``==``/``!=``/``in``/``<``... comparison against a version literal
    (a string constant, or a tuple/list/set holding one) in ``source``."""
    def is_version_literal(node: ast.expr) -> bool:
        if isinstance(node, ast.Constant):
            return isinstance(node.value, str) and node.value.strip().lower() in VERSION_LITERALS
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            return any(is_version_literal(e) for e in node.elts)
        return False

    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare) and any(is_version_literal(n) for n in [node.left, *node.comparators]):
            found.append((node.lineno, ast.unparse(node)))
    return found


def test_no_version_string_comparisons_outside_format_version():
    bad = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel == VERSION_PARSER or "_proto" in path.parts:
            continue
        bad += [f"{rel}:{line}: {text}" for line, text in version_string_comparisons(path.read_text())]
    assert not bad, "compare FileVersion members, or parse with lance_ops.format.version (ADR 0002):\n" + "\n".join(bad)


def test_the_version_comparison_checker_sees_comparisons():
    """The analysis itself: equality, membership and ordering against version text; other strings pass."""
    source = '''
a = version == "2.0"
b = v in ("0.1", "legacy")
c = version >= "2.2"
d = "2.1" != x
e = version is FileVersion.V2_0
f = mode == "append"
g = np.argsort(x, kind="stable")
'''
    assert [line for line, _ in version_string_comparisons(source)] == [2, 3, 4, 5]


# --- rule 3 in general: no private name of another module, no private attribute of its objects ---

#: private attributes of third-party objects with no public equivalent (reason beside each)
THIRD_PARTY_PRIVATE = {
    "_jsc",  # PySpark's SparkContext -> JavaSparkContext (Hadoop configuration); no public handle
    "_call",  # pyarrow's Expression._call: the only way to call a registered UDF inside an expression
}


def _defined_private_names(tree: ast.AST) -> set[str]:
    """``_name``s a module defines itself: functions, classes, module/class variables, ``x._a = ...``."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            names.add(node.attr)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__slots__" for t in node.targets):
            names |= {c.value for c in ast.walk(node.value) if isinstance(c, ast.Constant) and isinstance(c.value, str)}
    return {n for n in names if n.startswith("_") and not n.startswith("__")}


def foreign_private_uses(source: str) -> list[tuple[int, str]]:
    """(line, text) of each private name ``source`` takes from another module or another module's object.

    ``from lance_ops.x import _name`` counts; so does ``anything._name`` unless ``anything`` is
    ``self``/``cls`` or the module itself defines ``_name`` (its own classes' internals).
    """
    tree = ast.parse(source)
    own = _defined_private_names(tree) | THIRD_PARTY_PRIVATE
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("lance_ops") \
                and "_proto" not in (node.module or ""):
            found += [(node.lineno, f"from {node.module} import {a.name}") for a in node.names
                      if a.name.startswith("_") and not a.name.startswith("__")]
        elif isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
            if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
                continue
            if node.attr not in own:
                found.append((node.lineno, ast.unparse(node)))
    return found


#: uses that exist today (module: text); the list may only shrink
KNOWN_FOREIGN_PRIVATE: set[str] = set()


def test_no_private_name_of_another_module():
    bad = set()
    for top in PRODUCTION_DIRS:
        for path in sorted((ROOT / top).rglob("*.py")):
            if "_proto" in path.parts:
                continue
            rel = path.relative_to(ROOT).as_posix()
            bad |= {f"{rel}: {text}" for _, text in foreign_private_uses(path.read_text())}
    assert not bad - KNOWN_FOREIGN_PRIVATE, (
        "private names used across modules; give the owner a public name:\n" + "\n".join(sorted(bad)))
    assert not KNOWN_FOREIGN_PRIVATE - bad, "these are gone: remove them from KNOWN_FOREIGN_PRIVATE"


def test_the_foreign_private_checker_sees_uses():
    """The analysis itself: imports of private names, attributes of other objects, own internals allowed."""
    source = (
        "from lance_ops.table.x import _helper, public\n"
        "class A:\n    _cache = {}\n    def f(self, other):\n        return self._y, other._cache, other._z\n"
        "def g(mod):\n    return mod._secret, mod._jsc\n"
    )
    assert sorted(t for _, t in foreign_private_uses(source)) == [
        "from lance_ops.table.x import _helper", "mod._secret", "other._z"]


# --- rule 6: small modules with one job ------------------------------------------------------------
MAX_MODULE_LINES = 800


def test_no_module_over_800_lines():
    long = {p.relative_to(ROOT).as_posix(): n for p in PACKAGE.rglob("*.py") if "_proto" not in p.parts
            and (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES}
    assert long == {}, f"split these along their seams (docs/architecture.md rule 6): {long}"


# --- the Airflow provider (docs/adr/0018-airflow-provider-package.md) ------------------------------
AIRFLOW_TREE = ("lance_ops_airflow", "operators", "sensors", "dags")


def test_lance_ops_never_imports_the_provider_and_the_provider_never_edits_sys_path():
    upward = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            upward += [f"{path.relative_to(ROOT)}: {n}" for n in names if n.split(".")[0] == "lance_ops_airflow"]
    assert not upward, upward
    edits = [str(p.relative_to(ROOT)) for top in AIRFLOW_TREE for p in sorted((ROOT / top).rglob("*.py"))
             if "sys.path" in p.read_text()]
    assert not edits, f"import from lance_ops_airflow instead of editing sys.path: {edits}"
    generic = [f"{p.relative_to(ROOT)}" for top in AIRFLOW_TREE for p in sorted((ROOT / top).rglob("*.py"))
               if re.search(r"^\s*(from|import)\s+(operators|sensors|dags)\b", p.read_text(), re.M)]
    assert not generic, f"import the namespaced lance_ops_airflow.* path: {generic}"
