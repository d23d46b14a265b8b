"""Fixtures for the packaging tests: the distribution built as a wheel once per session, and fresh
virtualenvs with one extra each (issue 21, acceptance items 1 and 2).

The wheel is built from a copy of the source files (not the working tree, so no ``build/`` or
``*.egg-info`` lands in the repository) with the running venv's setuptools
(``--no-build-isolation``: no index access for the build backend). The dependencies of all extras
are fetched once into a wheelhouse, ``~/.cache/lance-ops/wheelhouse/<pyproject hash>/`` (outside the
clone, so later sessions and CI's fresh clones reuse it; ``pip wheel``, so sdists are built once). Each venv is created with ``python -m
venv`` and the wheel installed, non-editable, with ``pip install --no-index --find-links
<wheelhouse> <wheel>[extra]``: pip resolves the extra again and installs only what it declares, so
a missing dependency still fails the test, without a network round trip per package.
Subprocesses run with ``PYTHONPATH`` removed and a temporary working directory, so nothing is
imported from the repository.

The venvs are built together (``venvs``, one thread each): ``venv`` + ``pip install`` wait mostly on
the disk and use one core each, so the three overlap instead of queueing one after another. Only
the extras of the selected tests are built (their ``venv_extra`` marker).
"""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
#: per-user cache, outside the clone, so a fresh clone (CI) reuses what an earlier run fetched;
#: ``LANCE_OPS_WHEELHOUSES`` overrides it
WHEELHOUSES = Path(os.environ.get("LANCE_OPS_WHEELHOUSES")
                   or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "lance-ops" / "wheelhouse")
EXTRAS = ("airflow", "spark", "test")
#: what the wheel is built from (everything the Dockerfile copies)
SOURCES = ("pyproject.toml", "setup.py", "README.md", "lance_ops", "lance_ops_airflow", "operators", "sensors", "dags")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "venv_extra(name): the test uses the fresh venv with lance-ops[name] (venvs)")


def clean_env(**extra: str) -> dict[str, str]:
    """The environment without PYTHONPATH (and without the running venv's bin on PATH)."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "AIRFLOW_HOME")}
    venv_bin = str(Path(sys.executable).parent)
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if p != venv_bin)
    env.update(extra)
    return env


def run(cmd: list[str], *, cwd: Path, env: dict[str, str] | None = None, timeout: int = 600) -> subprocess.CompletedProcess:
    """Run ``cmd``; fail the test with its output when it exits non-zero."""
    proc = subprocess.run(cmd, cwd=str(cwd), env=env or clean_env(), capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"{cmd} exited {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc


@pytest.fixture(scope="session")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The lance-ops wheel, built once per session."""
    src = tmp_path_factory.mktemp("wheel-src")
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")
    for name in SOURCES:
        path = REPO / name
        if path.is_dir():
            shutil.copytree(path, src / name, ignore=ignore)
        else:
            shutil.copy2(path, src / name)
    out = tmp_path_factory.mktemp("wheel")
    run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out), str(src)],
        cwd=out)
    (built,) = out.glob("lance_ops-*.whl")
    return built


@pytest.fixture(scope="session")
def wheelhouse(wheel: Path) -> Path:
    """Wheels of every dependency of every extra, built once per pyproject.toml (then reused)."""
    stamp = hashlib.sha1((REPO / "pyproject.toml").read_bytes()).hexdigest()[:12]
    done = WHEELHOUSES / stamp
    if not (done / ".complete").exists():
        tmp = WHEELHOUSES / f"{stamp}.tmp{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        run([sys.executable, "-m", "pip", "wheel", "-q", "-w", str(tmp), f"{wheel}[{','.join(EXTRAS)}]"],
            cwd=tmp, timeout=1800)
        for own in tmp.glob("lance_ops-*.whl"):
            own.unlink()  # each test installs the wheel it built
        (tmp / ".complete").touch()
        if done.exists():  # another session finished first
            shutil.rmtree(tmp)
        else:
            os.replace(tmp, done)
    return done


def fresh_venv(where: Path, wheel: Path, wheelhouse: Path, extra: str) -> Path:
    """A new virtualenv at ``where`` with ``wheel[extra]`` installed (from ``wheelhouse`` only); its ``bin``."""
    run([sys.executable, "-m", "venv", str(where)], cwd=where.parent)
    bin_dir = where / "bin"
    run([str(bin_dir / "pip"), "install", "-q", "--no-compile", "--no-index", "--find-links", str(wheelhouse),
         f"{wheel}[{extra}]"], cwd=where.parent, timeout=900)
    return bin_dir


@pytest.fixture(scope="session")
def venvs(request: pytest.FixtureRequest, wheel: Path, wheelhouse: Path,
          tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """``{extra: bin dir}``: a fresh venv per extra that a selected test marks with ``venv_extra``,
    all built at the same time."""
    wanted = sorted({m.args[0] for item in request.session.items for m in item.iter_markers("venv_extra")})
    root = tmp_path_factory.mktemp("venvs")
    seconds: dict[str, float] = {}

    def build(extra: str) -> Path:
        start = time.monotonic()
        try:
            return fresh_venv(root / extra, wheel, wheelhouse, extra)
        finally:
            seconds[extra] = time.monotonic() - start

    start = time.monotonic()
    with ThreadPoolExecutor(max_workers=len(wanted) or 1) as pool:
        futures = {extra: pool.submit(build, extra) for extra in wanted}
        bins = {extra: future.result() for extra, future in futures.items()}
    print(f"venvs built together in {time.monotonic() - start:.1f} s (overlapping builds: "
          + ", ".join(f"{extra} {seconds[extra]:.1f} s" for extra in wanted) + ")")
    return bins
