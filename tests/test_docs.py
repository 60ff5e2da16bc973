"""Runs every ```python example of README.md and docs/*.md, and checks the docs' links and layout.

One test per page: the page's python blocks run in order in one namespace (a later block may use
an earlier one's names), on the active Keras backend, all pages in ONE shared temporary folder
in the order a reader meets them (README.md, then docs/ A-Z): an example that writes a file
another page already wrote (and refuses to replace) fails here as it would for the reader. The
command lines of the pages (```bash / ``` blocks) are checked statically: no two of them, and
no python example, write the same output path. A block whose
first line is `# doc: skip (REASON)` is not run (a download, a full-size model, a server); there
should be few. The layout table of docs/design.md must list every module under keras_vit/ and
nothing that does not exist; every relative link of the pages must point at a file that exists.
"""

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


@pytest.fixture(scope="module")
def shared_folder(tmp_path_factory):
    """The one folder every page's examples run in, in page order (as a reader would)."""
    return tmp_path_factory.mktemp("docs_examples")


@pytest.mark.parametrize(
    "page",
    [pytest.param(p, marks=pytest.mark.slow) if p in SLOW_PAGES else p for p in PAGES],
)
def test_examples_run(page, shared_folder, monkeypatch):
    blocks = python_blocks(read(page))
    monkeypatch.chdir(shared_folder)
    scope = {"__name__": "__doc_example__"}
    ran = 0
    for line, code in blocks:
        if not runnable(code):
            continue
        # Padding keeps the page's line numbers in tracebacks.
        exec(compile("\n" * (line - 1) + code, os.path.join(ROOT, page), "exec"), scope)
        ran += 1
    skipped = len(blocks) - ran
    assert skipped <= max(2, len(blocks) // 3), f"{page}: {skipped} of {len(blocks)} skipped"


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
                         "--num-classes", "--model", "--image-size", "--format", "--image"}
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
