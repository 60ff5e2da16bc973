"""Writes docs/catalogue.md from the registries: families, timm coverage, block kinds, layers.

Everything in the page is read from the code, never written by hand: the model families and
their timm name patterns, Hugging Face model types and modules (`keras_vit.weights.registry`),
how many of timm's names `from_timm` reads (keras_vit's table of timm's names,
`keras_vit.weights.timm.pretrained`, and `reads_timm_name`), the encoder block kinds
(`keras_vit.layers.BLOCK_KINDS`) and the layer modules with their public names
(`keras_vit.layers`). Module purposes are the first paragraphs of their docstrings.
tests/test_docs.py checks that the page is what this script writes; adding a family or a layer
means running it once.

Usage: python scripts/make_catalogue.py [--check]
"""

import argparse
import ast
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAGE = os.path.join(ROOT, "docs", "catalogue.md")


def _cell(text):
    return " ".join(str(text).split()).replace("|", "\\|")


def purpose(path):
    """The first paragraph of a module's docstring, on one line."""
    with open(path, encoding="utf-8") as f:
        doc = ast.get_docstring(ast.parse(f.read())) or ""
    return _cell(doc.split("\n\n")[0])


def _modules(folder):
    """`keras_vit/...` paths of the modules in `folder` (recursively), sorted, `__init__` first."""
    found = []
    for here, _, files in os.walk(os.path.join(ROOT, folder)):
        for name in files:
            if name.endswith(".py"):
                found.append(os.path.relpath(os.path.join(here, name), ROOT).replace(os.sep, "/"))
    return sorted(found, key=lambda p: (os.path.dirname(p), not p.endswith("__init__.py"), p))


def _module_table(paths):
    lines = ["| module | purpose |", "|---|---|"]
    lines += [f"| `{p}` | {purpose(os.path.join(ROOT, p))} |" for p in paths]
    return lines


def coverage_lines():
    """How many names of timm's ViT modules (and with the VLM towers) `from_timm` reads."""
    from keras_vit.weights.timm.pretrained import timm_modules
    from keras_vit.weights.timm.reader import reads_timm_name

    modules = timm_modules()
    of = modules["of"]
    vit = sorted(n for n in of if of[n] in modules["vit"])
    towers = sorted(n for n in of if of[n] in modules["vit"] + modules["towers"])
    version = _timm_version()
    lines = [
        "| selection | names | read by `from_timm` |",
        "|---|---:|---:|",
    ]
    for label, names in (
        (f"timm {version}'s ViT modules (" + ", ".join(f"`{m}`" for m in modules["vit"]) + ")",
         vit),
        ("the same and the VLM vision towers ("
         + ", ".join(f"`{m}`" for m in modules["towers"]) + ")", towers),
    ):  # fmt: skip
        read = sum(reads_timm_name(n) for n in names)
        lines.append(f"| {label} | {len(names)} | {read} ({100 * read / len(names):.1f}%) |")
    refused = [n for n in towers if not reads_timm_name(n)]
    lines += [
        "",
        "Not read (no registered family reads them): "
        + (", ".join(f"`{n}`" for n in refused) if refused else "none")
        + ".",
    ]
    return lines


def _timm_version():
    from keras_vit.weights.timm import pretrained

    return pretrained._table()["timm_version"]


def family_lines():
    from keras_vit.weights.registry import registered

    package = "keras_vit/families/__init__.py"
    lines = [f"`{package}`: {purpose(os.path.join(ROOT, package))}", ""]
    for record in registered():
        folder = f"keras_vit/families/{record.name}/"
        lines += [f"### `{record.name}`", "", _cell(record.description), ""]
        facts = []
        if record.timm_reader:
            facts.append(f"its own timm reader (`{record.timm_reader}`)")
        if record.timm_layout:
            facts.append(f"its timm checkpoint layout (`{record.timm_layout}`)")
        if record.huggingface_readers:
            types = ", ".join(f"`{t}`" for t in sorted(record.huggingface_readers))
            facts.append(f"transformers model types {types}")
        if record.huggingface_writers:
            classes = ", ".join(f"`{c}`" for c in sorted(record.huggingface_writers))
            facts.append(f"its own `export_huggingface` for {classes}")
        if facts:
            lines += ["Registers " + "; ".join(facts) + ".", ""]
        if record.timm_specs:
            lines += ["| timm names | example | what |", "|---|---|---|"]
            for name, _, example, description, _ in record.timm_specs:
                lines.append(f"| `{name}` | `{example}` | {_cell(description)} |")
            lines.append("")
        for pattern, why in record.timm_unsupported:
            lines += [f"Refused: `{pattern}`: {_cell(why)}.", ""]
        lines += [f"Modules (`{folder}`):", ""]
        lines += _module_table(_modules(folder))
        lines.append("")
    return lines


def block_kind_lines():
    import keras_vit.layers as layers

    lines = ["| kind | class | module |", "|---|---|---|"]
    for kind, cls in sorted(layers.BLOCK_KINDS.items()):
        path = cls.__module__.replace(".", "/") + ".py"
        lines.append(f"| `{kind!r}` | `{cls.__name__}` | `{path}` |".replace("'", '"'))
    return lines


def layer_lines():
    import keras_vit.layers as layers

    exported = {}
    for name in layers.__all__:
        module = getattr(getattr(layers, name), "__module__", None)
        if module is None or not module.startswith("keras_vit.layers"):  # BLOCK_KINDS (a dict)
            module = "keras_vit.layers.block_kinds"
        exported.setdefault(module.replace(".", "/") + ".py", []).append(name)
    lines = ["| module | purpose | public names |", "|---|---|---|"]
    for path in _modules("keras_vit/layers"):
        names = ", ".join(f"`{n}`" for n in sorted(exported.get(path, ())))
        lines.append(f"| `{path}` | {purpose(os.path.join(ROOT, path))} | {names} |")
    return lines


def render():
    """The page's markdown."""
    sys.path.insert(0, ROOT)
    lines = [
        "# Catalogue",
        "",
        "<!-- generated by scripts/make_catalogue.py from the registries; do not edit by hand "
        "(tests/test_docs.py checks it) -->",
        "",
        "What keras_vit holds, read from its registries: the model families (one folder each",
        "under `keras_vit/families/`, registered in `keras_vit.weights.registry`), how many of",
        "timm's names `from_timm` reads, the encoder block kinds and the layers. A new family or",
        "layer is new files; `python scripts/make_catalogue.py` rewrites this page.",
        "[adding_a_family.md](adding_a_family.md) walks through adding a family;",
        "[design.md](design.md) says where everything else lives.",
        "",
        "## timm names read",
        "",
        *coverage_lines(),
        "",
        "## Model families",
        "",
        *family_lines(),
        "## Encoder block kinds",
        "",
        "The blocks a `ViTConfig` chooses by value (`keras_vit.layers.BLOCK_KINDS`, "
        "[design.md](design.md#block-kinds)):",
        "",
        *block_kind_lines(),
        "",
        "## Layers",
        "",
        "Every public module of `keras_vit/layers/`, its purpose and the names it adds to "
        "`keras_vit.layers` (its `__all__`):",
        "",
        *layer_lines(),
        "",
    ]
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="compare, write nothing")
    args = parser.parse_args()
    text = render()
    if args.check:
        with open(PAGE, encoding="utf-8") as f:
            same = f.read() == text
        print("up to date" if same else f"{PAGE} differs: run scripts/make_catalogue.py")
        return 0 if same else 1
    with open(PAGE, "w", encoding="utf-8") as f:
        f.write(text)
    print(f"wrote {PAGE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
