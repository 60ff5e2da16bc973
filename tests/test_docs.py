"""Runs every ```python example of README.md and docs/*.md, and checks the docs' links and layout.

A page's python blocks run in order in one namespace (a later block may use an earlier one's
names), on the active Keras backend, as a reader runs them. They run as several tests, each
failing on its own: `example_groups` splits the blocks of all pages into
groups that share nothing, each one test in its own folder. Two blocks of a page fall in the same
group when the later uses a name the earlier one made (other than by an import: each block of a
group runs after the import lines of the page's earlier blocks, which any block may use); two
blocks of any pages fall in the same group when they name the same file or folder (a string such as
"model.keras" or "serving/"): a group's blocks run in reader order (README.md, then docs/ A-Z)
in one shared temporary folder, so an example that writes a file another example already wrote
(and refuses to replace) fails here as it would for the reader. The command lines of the pages
(```bash / ``` blocks) are checked statically: no two of them, and no python example, write the
same output path. A block whose first line is `# doc: skip (REASON)` is not run (a download, a
full-size model, a server); there should be few. The layout table of docs/design.md must list
every module under keras_vit/ and nothing that does not exist; every relative link of the pages
must point at a file that exists.
"""

import ast
import builtins
import glob
import os
import re

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAGES = ["README.md"] + sorted(
    os.path.relpath(path, ROOT) for path in glob.glob(os.path.join(ROOT, "docs", "*.md"))
)
# Pages whose examples take more than ~20 s on 2 CPU cores (JAX: 26-47 s; they export or train).
SLOW_PAGES = {"docs/export.md", "docs/models.md", "docs/training.md"}
SKIP = re.compile(r"# doc: skip \(.+\)")
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


def read(page):
    with open(os.path.join(ROOT, page), encoding="utf-8") as f:
        return f.read()


def python_blocks(text):
    """(line number, code) of every ```python block, in order."""
    return [(text.count("\n", 0, m.start()) + 2, m.group(1)) for m in BLOCK.finditer(text)]


def runnable(block):
    first = block.lstrip().splitlines()[0] if block.strip() else ""
    if first.startswith("# doc: skip"):
        assert SKIP.fullmatch(first), f"a skip mark needs a reason: {first!r}"
        return False
    return True


def test_pages_are_found():
    assert "docs/models.md" in PAGES and "docs/design.md" in PAGES and len(PAGES) >= 8


# A string that names a file or folder: a dotted file name or a path ending in "/" (not a
# variant code such as "mu/8"); f-strings count by their constant parts.
PATH = re.compile(r"[\w./-]*(\.[A-Za-z][\w.]*|/)")
VARIANT = re.compile(r"[A-Za-z0-9+]+/\d+")


def _bound_names(node):
    """Names a statement binds at the top level of a page's namespace."""
    if isinstance(node, ast.Import | ast.ImportFrom):
        return {(a.asname or a.name).split(".")[0] for a in node.names}
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return {node.name}
    nested = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef, ast.comprehension)
    names, stack = set(), [node]
    while stack:
        current = stack.pop()
        if isinstance(current, ast.Name) and isinstance(current.ctx, ast.Store | ast.Del):
            names.add(current.id)
        if not isinstance(current, nested):
            stack.extend(ast.iter_child_nodes(current))
    return names


def _loaded_names(node):
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def _paths(tree):
    """The file and folder names a block's strings mention."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            texts = [node.value]
        elif isinstance(node, ast.JoinedStr):
            texts = [v.value for v in node.values if isinstance(v, ast.Constant)]
        else:
            continue
        for text in texts:
            if PATH.fullmatch(text) and not VARIANT.fullmatch(text) and len(text) > 1:
                found.add(os.path.normpath(text.split("/")[0] if "/" in text else text))
    return found


def example_groups():
    """The runnable python blocks of all pages, split into groups that share nothing.

    Returns a list of groups in reader order, each a list of `(page, line, code)`: blocks of one
    page are in one group when a later one uses a name an earlier one bound other than by an
    import; blocks of any pages are in one group when they name the same file or folder (the
    first part of a path: "runs/a" and "runs/b" are one group).
    """
    blocks = []  # (page, line, code, tree)
    for page in PAGES:
        for line, code in python_blocks(read(page)):
            if runnable(code):
                blocks.append((page, line, code, ast.parse(code)))
    parent = list(range(len(blocks)))

    def root(i):
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    def join(i, j):
        parent[root(i)] = root(j)

    builtin = set(dir(builtins))
    binder, by_path, page_of = {}, {}, None  # name -> (block, by an import?) within a page
    for i, (page, _, _, tree) in enumerate(blocks):
        if page != page_of:
            binder, page_of = {}, page
        bound_here = set()
        for statement in tree.body:
            for name in _loaded_names(statement) - bound_here - builtin:
                if name in binder and not binder[name][1]:
                    join(i, binder[name][0])
            imported = isinstance(statement, ast.Import | ast.ImportFrom)
            for name in _bound_names(statement):
                bound_here.add(name)
                binder[name] = (i, imported)
        for path in _paths(tree):
            if path in by_path:
                join(i, by_path[path])
            by_path[path] = i
    groups = {}
    for i, (page, line, code, _) in enumerate(blocks):
        groups.setdefault(root(i), []).append((page, line, code))
    return list(groups.values())


def group_id(group):
    """`page:line` of the group's first block, `+N` for its N other blocks."""
    page, line, _ = group[0]
    return f"{page}:{line}" + (f"+{len(group) - 1}" if len(group) > 1 else "")


GROUPS = example_groups()
# Groups whose examples take more than ~20 s on 2 CPU cores (JAX; they export or train).
SLOW_GROUPS = set()


def import_lines(page, after, before):
    """The page's top-level import statements in runnable blocks between two lines."""
    code = []
    for line, block in python_blocks(read(page)):
        if after < line < before and runnable(block):
            for node in ast.parse(block).body:
                if isinstance(node, ast.Import | ast.ImportFrom):
                    code.append(ast.unparse(node))
    return "\n".join(code)


def test_every_runnable_block_is_in_one_group():
    pages = {}
    for group in GROUPS:
        for page, line, _ in group:
            pages.setdefault(page, []).append(line)
    for page in PAGES:
        runnable_lines = [line for line, code in python_blocks(read(page)) if runnable(code)]
        assert sorted(pages.get(page, [])) == runnable_lines, page


@pytest.mark.parametrize("page", PAGES)
def test_pages_skip_few_examples(page):
    blocks = python_blocks(read(page))
    skipped = len(blocks) - sum(runnable(code) for _, code in blocks)
    assert skipped <= max(2, len(blocks) // 3), f"{page}: {skipped} of {len(blocks)} skipped"


@pytest.mark.parametrize(
    "group",
    [
        pytest.param(
            g,
            id=group_id(g),
            marks=[pytest.mark.slow] if group_id(g) in SLOW_GROUPS else [],
        )
        for g in GROUPS
    ],
)
def test_examples_run(group, tmp_path, monkeypatch):
    """The group's blocks in reader order in one folder, each page's in one namespace."""
    monkeypatch.chdir(tmp_path)
    scopes, last = {}, {}
    for page, line, code in group:
        scope = scopes.setdefault(page, {"__name__": "__doc_example__"})
        # The imports of the page's blocks above this one that run in other groups.
        exec(import_lines(page, last.get(page, 0), line), scope)
        # Padding keeps the page's line numbers in tracebacks.
        exec(compile("\n" * (line - 1) + code, os.path.join(ROOT, page), "exec"), scope)
        last[page] = line


def module_paths():
    """Every module file under keras_vit/ (packages' __init__.py included), relative to the root."""
    return {
        os.path.relpath(path, ROOT).replace(os.sep, "/")
        for path in glob.glob(os.path.join(ROOT, "keras_vit", "**", "*.py"), recursive=True)
    }


def test_design_lists_every_module():
    """docs/design.md lists every module, but the layers' and the family folders', which the
    generated docs/catalogue.md lists (`test_catalogue_is_generated_from_the_registries`)."""
    listed = set(re.findall(r"`(keras_vit/[\w/]+\.py)`", read("docs/design.md")))
    listed |= set(re.findall(r"`(keras_vit/[\w/]+\.py)`", read("docs/catalogue.md")))
    actual = module_paths()
    assert not actual - listed, f"modules missing from docs/design.md: {sorted(actual - listed)}"
    assert not listed - actual, f"docs/design.md lists missing modules: {sorted(listed - actual)}"


def test_catalogue_is_generated_from_the_registries():
    """docs/catalogue.md is what scripts/make_catalogue.py writes now (families, timm coverage,
    block kinds, layers): run the script after adding a family or a layer."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "make_catalogue", os.path.join(ROOT, "scripts", "make_catalogue.py")
    )
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    assert read("docs/catalogue.md") == script.render(), "run scripts/make_catalogue.py"


def test_design_lists_every_package():
    text = read("docs/design.md") + read("docs/catalogue.md")
    for path in glob.glob(os.path.join(ROOT, "keras_vit", "**", "__init__.py"), recursive=True):
        package = os.path.relpath(os.path.dirname(path), ROOT).replace(os.sep, "/")
        assert f"`{package}/`" in text or package == "keras_vit", package


@pytest.mark.parametrize("page", PAGES)
def test_relative_links_exist(page):
    text = read(page)
    base = os.path.dirname(os.path.join(ROOT, page))
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue
        path = target.split("#")[0]
        assert os.path.exists(os.path.join(base, path)), f"{page}: broken link {target}"


def test_cli_page_lists_every_flag():
    """docs/cli.md has a section per command naming each of its flags (make_cli_docs.py)."""
    import argparse

    from keras_vit.cli.app import build_parser

    text = read("docs/cli.md")
    (commands,) = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    for name, sub in commands.choices.items():
        heading = f"### `keras-vit {name}`"
        assert heading in text, f"no {heading} in docs/cli.md: run scripts/make_cli_docs.py"
        section = text.split(heading, 1)[1].split("\n### ", 1)[0]
        for action in sub._actions:
            for flag in action.option_strings:
                if flag not in ("-h", "--help"):
                    assert f"`{flag}" in section, f"keras-vit {name} {flag} is not in docs/cli.md"


def fenced_blocks(text):
    """(info string, code) of every fenced block, opening and closing fences paired in order."""
    blocks, info, lines = [], None, []
    for line in text.splitlines():
        if line.startswith("```"):
            if info is None:
                info, lines = line[3:].strip(), []
            else:
                blocks.append((info, "\n".join(lines)))
                info = None
        elif info is not None:
            lines.append(line)
    return blocks

# The python writers that refuse an existing target: their first string argument.
PYTHON_WRITES = re.compile(
    r"export_(?:timm|huggingface|onnx|litert|saved_model)\(\w+, \"([^\"]+)\""
)


def command_lines(text):
    """Every `keras-vit ...` command line of the page's shell blocks (continuations joined)."""
    lines = []
    for info, block in fenced_blocks(text):
        if info not in ("", "bash", "sh", "console"):
            continue
        joined = re.sub(r"\\\n\s*", " ", block)
        for line in joined.splitlines():
            line = line.split("#", 1)[0].strip().strip("'\"")
            line = re.sub(r"^(\w+=\S+ )+", "", line)  # KERAS_BACKEND=... prefixes
            if line.startswith(("keras-vit ", "python -m keras_vit ")):
                lines.append(line)
    return lines


def written_by(line):
    """The output path a command line writes, or None (a command that writes nothing)."""
    words = line.split()
    words = words[3:] if words[0] == "python" else words[1:]
    command, rest = words[0], words[1:]
    if "--out" in rest:
        return rest[rest.index("--out") + 1]
    flags_with_values = {"--from", "--to", "--version", "--quantize", "--representative-data",
                         "--num-classes", "--model", "--image-size", "--format", "--image",
                         "--precision"}
    positional, skip = [], False
    for word in rest:
        if skip:
            skip = False
        elif word.startswith("--"):
            skip = word in flags_with_values
        else:
            positional.append(word)
    if command in ("export", "convert") and positional:
        return positional[-1]
    return None


def test_examples_write_each_output_once():
    """README then docs/ A-Z, followed in one folder: no output is written twice (the second
    writer would refuse, or the pages would read one file as two different models)."""
    seen = {}
    for page in PAGES:
        text = read(page)
        targets = [written_by(line) for line in command_lines(text)]
        targets += PYTHON_WRITES.findall("\n".join(c for _, c in python_blocks(text)))
        for target in targets:
            if target is None or "--process-id" in str(target):
                continue
            key = os.path.normpath(target)
            assert key not in seen or seen[key] == page and target.startswith("runs/two"), (
                f"{page} writes {target!r}, which {seen.get(key)} already wrote"
            )
            seen[key] = page
