"""Runs the tests a change touches, on one backend: the contributor's fast loop.

Usage: python scripts/test_changed.py [--base REF] [--backend NAME] [--list] [pytest args...]

The change is every file that differs from `--base` (default `main`; committed since the branch
left it, staged, unstaged and untracked). Each changed file maps to test files:

- a test file (`tests/**/test_*.py`): itself;
- a module `keras_vit/PATH/NAME.py`: its mirror `tests/PATH/test_NAME.py` when there is one, and
  every test file that names the module (`keras_vit.PATH.NAME`, or `NAME` imported from its
  package); a package's `__init__.py` maps to its folder's tests;
- a family folder `keras_vit/families/NAME/`: the tests under `tests/families/NAME/`;
- a test helper (`tests/helpers.py`, `tests/layer_harness.py`, `tests/weights/*.py`, ...): the
  test files that import it;
- a docs page (README.md, docs/*.md): the tests of tests/test_docs.py that run or check it
  (its example groups, its links, its skip count) and the docs-wide checks;
- a script `scripts/NAME.py`: the test files that name it;
- anything else (pyproject.toml, CHANGELOG.md, ...): tests/test_architecture.py.

Then runs them through scripts/run_tests.sh with KERAS_VIT_BACKENDS set to the one backend
(default: $KERAS_BACKEND, else torch, the fastest), so on two cores most changes finish in
under two minutes. `--list` prints the mapping and runs nothing. For the last failures only,
`python -m pytest --lf` (pytest's cache: run without `-p no:cacheprovider`).
"""

import argparse
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def git(*args):
    result = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True)
    if result.returncode != 0:
        raise SystemExit(f"git {' '.join(args)} failed: {result.stderr.strip()}")
    return [line for line in result.stdout.splitlines() if line.strip()]


def changed_files(base):
    merge_base = git("merge-base", base, "HEAD")[0]
    files = set(git("diff", "--name-only", merge_base))  # committed, staged and unstaged
    files |= set(git("ls-files", "--others", "--exclude-standard"))
    return sorted(files)


def test_files():
    found = []
    for folder, _, names in os.walk(os.path.join(ROOT, "tests")):
        for name in names:
            if name.startswith("test_") and name.endswith(".py"):
                found.append(os.path.relpath(os.path.join(folder, name), ROOT).replace(os.sep, "/"))
    return sorted(found)


def read(path):
    with open(os.path.join(ROOT, path), encoding="utf-8") as f:
        return f.read()


def users(dotted, tests):
    """Test files that import the module `dotted` (by its dotted name or from its package)."""
    package, _, name = dotted.rpartition(".")
    pattern = re.compile(
        rf"\b{re.escape(dotted)}\b|from {re.escape(package)} import [^\n]*\b{re.escape(name)}\b"
    )
    return [t for t in tests if pattern.search(read(t))]


def docs_tests(page):
    """The node ids of tests/test_docs.py that run or check `page`."""
    sys.path.insert(0, ROOT)
    from tests import test_docs

    ids = [
        f"tests/test_docs.py::test_examples_run[{test_docs.group_id(group)}]"
        for group in test_docs.GROUPS
        if any(p == page for p, _, _ in group)
    ]
    ids += [f"tests/test_docs.py::{name}[{page}]"
            for name in ("test_relative_links_exist", "test_pages_skip_few_examples")]
    ids += [f"tests/test_docs.py::{name}" for name in (
        "test_pages_are_found", "test_every_runnable_block_is_in_one_group",
        "test_examples_write_each_output_once", "test_design_lists_every_module",
        "test_design_lists_every_package", "test_cli_page_lists_every_flag")]
    return ids


def tests_for(path, tests):
    """The test files or node ids a changed file maps to."""
    if path in tests:
        return [path]
    if path.endswith(".md") and (path == "README.md" or path.startswith("docs/")):
        return docs_tests(path) if os.path.exists(os.path.join(ROOT, path)) else []
    if path.startswith("keras_vit/families/"):
        family = path.split("/")[2]
        own = [t for t in tests if t.startswith(f"tests/families/{family}/")]
        if own:
            return own
    if path.startswith("scripts/") and path.endswith(".py"):
        name = os.path.basename(path)
        return [t for t in tests if name in read(t) or f"scripts.{name[:-3]}" in read(t)]
    if path.startswith(("keras_vit/", "tests/")) and path.endswith(".py"):
        parts = path[: -len(".py")].split("/")
        if parts[-1] == "__init__":
            parts = parts[:-1]
            folder = "/".join(["tests"] + parts[1:]) + "/"
            found = [t for t in tests if t.startswith(folder)] if parts[1:] else []
            return sorted(set(found + users(".".join(parts), tests)))
        mirror = "/".join(["tests"] + parts[1:-1] + [f"test_{parts[-1]}.py"])
        found = [mirror] if mirror in tests else []
        return sorted(set(found + users(".".join(parts), tests)))
    return ["tests/test_architecture.py"]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--base", default="main", help="the git ref the change is against")
    parser.add_argument("--backend", default=os.environ.get("KERAS_BACKEND") or "torch",
                        choices=("tensorflow", "jax", "torch"))
    parser.add_argument("--list", action="store_true", help="print the mapping, run nothing")
    args, pytest_args = parser.parse_known_args(argv)
    tests = test_files()
    selected = []
    for path in changed_files(args.base):
        found = [t for t in tests_for(path, tests)
                 if os.path.exists(os.path.join(ROOT, t.split("::")[0]))]
        shown = sorted({t.split("::")[0] + ("::..." if "::" in t else "") for t in found})
        print(f"{path} -> {' '.join(shown) or 'no test'}")
        selected += [t for t in found if t not in selected]
    # A whole file given makes its node ids redundant.
    selected = [t for t in selected if "::" not in t or t.split("::")[0] not in selected]
    if not selected:
        print(f"no test maps to the change against {args.base}")
        return 0
    if args.list:
        return 0
    command = ["scripts/run_tests.sh", *selected, *pytest_args]
    env = dict(os.environ, KERAS_VIT_BACKENDS=args.backend)
    print(f"KERAS_VIT_BACKENDS={args.backend} scripts/run_tests.sh "
          f"({len(selected)} test files or ids) {' '.join(pytest_args)}", flush=True)
    return subprocess.call(command, cwd=ROOT, env=env)


if __name__ == "__main__":
    sys.exit(main())
