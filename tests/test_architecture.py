"""The package's shape: no import cycle between keras_vit modules; layers register on import.

An import is any `import` statement (in functions too) and any module named by a string: a
`"keras_vit.x.y"` or `"keras_vit.x.y:name"` constant (what `importlib.import_module`,
`__import__` and the registries' `"module:function"` entries import) or an f-string starting
with a module's name (`f"keras_vit.runner.{name}"` imports from `keras_vit.runner`).
"""

import ast
import os
import re
import shutil
import subprocess
import sys

import keras
import numpy as np
import pytest

from keras_vit.models import ViT
from tests.helpers import backend_independent

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = os.path.join(ROOT, "keras_vit")


def _modules():
    """Maps every module name under keras_vit/ to its file (packages by their __init__.py)."""
    modules = {}
    for folder, _, files in os.walk(PACKAGE):
        for file in files:
            if not file.endswith(".py"):
                continue
            parts = os.path.relpath(os.path.join(folder, file), ROOT)[: -len(".py")]
            parts = parts.split(os.sep)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            modules[".".join(parts)] = os.path.join(folder, file)
    return modules


_MODULE_STRING = re.compile(r"keras_vit(\.[A-Za-z_]\w*)+(:[A-Za-z_]\w*)?")


def _named_module(text, modules):
    """The module a string names (`"keras_vit.a.b"`, `"keras_vit.a.b:name"`, a name inside a
    module: the longest module prefix), or None."""
    name = text.partition(":")[0]
    parts = name.split(".")
    for end in range(len(parts), 0, -1):
        if ".".join(parts[:end]) in modules:
            return ".".join(parts[:end])
    return None


def _string_imports(node, modules):
    """The modules a string constant or f-string names (see the module docstring)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        if _MODULE_STRING.fullmatch(node.value):
            return [_named_module(node.value, modules)]
    elif isinstance(node, ast.JoinedStr) and node.values:
        head = node.values[0]
        if isinstance(head, ast.Constant) and isinstance(head.value, str):
            prefix = head.value.rstrip(".")
            if head.value.endswith(".") and _MODULE_STRING.fullmatch(prefix):
                return [_named_module(prefix, modules)]
    return []


def _imports(module, path, modules):
    """The keras_vit modules that `module` imports anywhere (inside functions too, and by
    string: see the module docstring)."""
    is_package = path.endswith("__init__.py")
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), filename=path)
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".")
                base = base[: len(base) - node.level + (1 if is_package else 0)]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module
            # `from pkg import submodule` is an edge to the submodule, `from mod import name` to
            # the module (a package's __init__ runs first either way; that is not an edge).
            names = [
                f"{source}.{alias.name}" if f"{source}.{alias.name}" in modules else source
                for alias in node.names
            ]
        else:
            names = _string_imports(node, modules)
        for name in names:
            if name in modules and name != module:
                found.add(name)
    return found


def import_graph():
    modules = _modules()
    return {module: _imports(module, path, modules) for module, path in modules.items()}


def find_cycle(graph):
    """One cycle as a list of modules (first == last), or None."""
    state = {}
    stack = []

    def visit(node):
        state[node] = "open"
        stack.append(node)
        for target in sorted(graph[node]):
            if state.get(target) == "open":
                return stack[stack.index(target) :] + [target]
            if target not in state:
                cycle = visit(target)
                if cycle:
                    return cycle
        stack.pop()
        state[node] = "done"
        return None

    for node in sorted(graph):
        if node not in state:
            cycle = visit(node)
            if cycle:
                return cycle
    return None


def test_find_cycle_reports_a_cycle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_relative_and_submodule_imports_resolve(tmp_path):
    modules = {"pkg": "", "pkg.sub": "", "pkg.sub.leaf": "", "pkg.other": ""}
    source = tmp_path / "leaf.py"
    source.write_text(
        "from . import other_name\n"
        "from .. import other\n"
        "def f():\n"
        "    import pkg.sub\n"
        "    from pkg.other import thing\n"
    )
    assert _imports("pkg.sub.leaf", str(source), modules) == {"pkg.sub", "pkg.other"}
    init = tmp_path / "__init__.py"
    init.write_text("from .leaf import x\nfrom . import leaf\n")
    assert _imports("pkg.sub", str(init), modules) == {"pkg.sub.leaf"}


def test_imports_by_string_are_imports(tmp_path):
    """importlib / __import__ by name, registries' "module:function" entries and f-strings
    naming a package are edges (the registry once imported the families by string)."""
    modules = {
        name: ""
        for name in ("keras_vit", "keras_vit.families", "keras_vit.families.eva",
                     "keras_vit.families.eva.timm_table", "keras_vit.runner",
                     "keras_vit.weights", "keras_vit.weights.registry")
    }  # fmt: skip
    source = tmp_path / "registry.py"
    source.write_text(
        "import importlib\n"
        "def load():\n"
        "    importlib.import_module('keras_vit.families')\n"
        "    __import__('keras_vit.weights')\n"
        "LAYOUT = 'keras_vit.families.eva.timm_table:TIMM_LAYOUT'\n"
        "def run(name):\n"
        "    return importlib.import_module(f'keras_vit.runner.{name}')\n"
        "MESSAGE = 'see keras_vit.weights.registry for the families'  # prose: no edge\n"
    )
    assert _imports("keras_vit.weights.registry", str(source), modules) == {
        "keras_vit.families",
        "keras_vit.families.eva.timm_table",
        "keras_vit.runner",
        "keras_vit.weights",
    }


def unknown_imports(modules):
    """`["file:line imports keras_vit.x.y", ...]`: absolute `import` / `from ... import`
    statements anywhere in `modules`' files (functions too) whose keras_vit module does not
    exist. A function-local import of a renamed module fails only when that function runs (issue
    58 renamed `keras_vit.weights.timm.hub`; `finetune --init <timm name>` then failed with
    ModuleNotFoundError), so the import graph above, which skips unknown names, cannot show it."""
    found = []
    for path in sorted(set(modules.values())):
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), filename=path)
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                names = [node.module]
            else:
                continue
            for name in names:
                if name.split(".")[0] == "keras_vit" and name not in modules:
                    found.append(f"{os.path.relpath(path, ROOT)}:{node.lineno} imports {name}")
    return found


@backend_independent  # reads source files
def test_every_keras_vit_import_names_an_existing_module(tmp_path):
    source = tmp_path / "stale.py"
    source.write_text(
        "import keras_vit.models\n"
        "def f():\n"
        "    from keras_vit.weights.timm.hub import hub_checkpoint\n"
        "    from keras_vit.models import ViT\n"
    )
    fake = {"keras_vit.models": str(source), "keras_vit": str(source)}
    assert unknown_imports(fake) == [
        f"{os.path.relpath(str(source), ROOT)}:3 imports keras_vit.weights.timm.hub"
    ]
    assert unknown_imports(_modules()) == []


def test_no_import_cycle_in_keras_vit():
    graph = import_graph()
    assert "keras_vit.models.vit" in graph and "keras_vit.layers.std_conv" in graph
    # The model modules stack one way: vit never imports hybrid (hybrid builds on vit).
    assert "keras_vit.models.hybrid" not in graph["keras_vit.models.vit"]
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


# The floors of the package, bottom up: a module imports only from its own floor or below,
# function-local imports included. Floors hold the top-level subpackages and modules of
# keras_vit; ones not listed here (new packages) are checked only in that no listed floor up to
# `models` may import them, and that no cycle forms.
FLOORS = (
    ("version", "_public", "_plugins", "_start_lines", "layers", "preprocessing"),
    ("models",),
    ("saving",),
    ("weights", "training", "data", "mpp", "distribution"),
    ("families",),
    ("export", "inspect", "inspection"),
    ("recipes", "runner"),
    ("quickstart",),
    ("cli",),
    ("__main__", "__init__", "_api"),
)
_RANK = {name: rank for rank, names in enumerate(FLOORS) for name in names}
_BASE = _RANK["models"]


def _package(module):
    """`keras_vit.models.vit` -> `models`; the package itself -> `__init__`."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def package_graph(graph):
    """`{package: {(imported package, importing module, imported module)}}` across packages."""
    edges = {}
    for module, targets in graph.items():
        for target in targets:
            source, sink = _package(module), _package(target)
            if source != sink:
                edges.setdefault(source, set()).add((sink, module, target))
    return edges


def floor_violations(graph):
    """`["a.b imports c.d (floor x below floor y)", ...]` for every import up the floors."""
    found = []
    for source, edges in sorted(package_graph(graph).items()):
        for sink, module, target in sorted(edges):
            rank, other = _RANK.get(source), _RANK.get(sink)
            if rank is None:
                continue  # a package not listed: only the cycle check applies to it
            if (other is None and rank <= _BASE) or (other is not None and other > rank):
                found.append(f"{module} imports {target} ({source} is below {sink})")
    return found


def test_floor_violations_are_found():
    graph = {
        "keras_vit.models.vit": {"keras_vit.weights.presets"},
        "keras_vit.weights.presets": {"keras_vit.models.variants"},
        "keras_vit.layers.x": {"keras_vit.newpkg.y"},
        "keras_vit.newpkg.y": {"keras_vit.cli.app"},
        "keras_vit.cli.app": {"keras_vit.newpkg.y", "keras_vit.models.vit"},
    }
    assert floor_violations(graph) == [
        "keras_vit.layers.x imports keras_vit.newpkg.y (layers is below newpkg)",
        "keras_vit.models.vit imports keras_vit.weights.presets (models is below weights)",
    ]


def test_subpackages_form_a_one_way_stack():
    """layers < models < saving < weights/training < export < ... < cli, local imports too."""
    graph = import_graph()
    assert floor_violations(graph) == []
    packages = {
        source: {sink for sink, _, _ in edges} for source, edges in package_graph(graph).items()
    }
    for package in {name for edges in packages.values() for name in edges}:
        packages.setdefault(package, set())
    cycle = find_cycle(packages)
    assert cycle is None, "packages import each other: " + " -> ".join(cycle)
    # The models never reach the weights package (it plugs into models.pretrained instead).
    assert "weights" not in packages["models"]


# Inside `keras_vit.weights`: one package per checkpoint source over the common machinery at
# its top level (docs/design.md, "The weights package"). A common module imports no source
# package; a source imports the common modules and no other source, except `presets` (its files
# are official `.npz` files); `convert` and the package's `__init__` fan out over the sources.
WEIGHT_SOURCES = ("timm", "huggingface", "npz", "presets")
WEIGHT_SOURCE_READS = {"presets": {"npz"}}
WEIGHTS_FAN_OUT = ("keras_vit.weights", "keras_vit.weights.convert")
# `read_state_dict` reads any checkpoint file: a `.npz` through the npz source (imported when
# one is read); the family registry checks that no timm name is read by two families against
# the table of timm's names (pure data).
WEIGHTS_COMMON_READS = {
    ("keras_vit.weights.state_dict", "keras_vit.weights.npz.checkpoints"),
    ("keras_vit.weights.registry", "keras_vit.weights.timm.pretrained"),
}


def _weights_part(module):
    """`keras_vit.weights.timm.reader` -> `timm`; a common module -> None; outside -> False."""
    parts = module.split(".")
    if parts[:2] != ["keras_vit", "weights"]:
        return False
    return parts[2] if len(parts) > 3 and parts[2] in WEIGHT_SOURCES else None


def weights_violations(graph):
    """`["a imports b (...)", ...]` for every import across the weights sources' rule."""
    found = []
    for module, targets in sorted(graph.items()):
        source = _weights_part(module)
        if source is False or module in WEIGHTS_FAN_OUT:
            continue
        for target in sorted(targets):
            sink = _weights_part(target)
            if sink in (False, None) or sink == source:
                continue
            if source is None and (module, target) not in WEIGHTS_COMMON_READS:
                found.append(f"{module} imports {target} (common code imports a source)")
            elif source is not None and sink not in WEIGHT_SOURCE_READS.get(source, ()):
                found.append(f"{module} imports {target} ({source} reads {sink})")
    return found


def test_weights_violations_are_found():
    graph = {
        "keras_vit.weights.loading": {"keras_vit.weights.timm.table"},
        "keras_vit.weights.timm.reader": {
            "keras_vit.weights.loading",
            "keras_vit.weights.npz.names",
        },
        "keras_vit.weights.presets.catalogue": {"keras_vit.weights.npz.checkpoints"},
        "keras_vit.weights.convert": {"keras_vit.weights.timm.reader"},
        "keras_vit.families.vit": {"keras_vit.weights.timm.sizes"},
    }
    assert weights_violations(graph) == [
        "keras_vit.weights.loading imports keras_vit.weights.timm.table (common code imports a "
        "source)",
        "keras_vit.weights.timm.reader imports keras_vit.weights.npz.names (timm reads npz)",
    ]


def test_weights_sources_stand_apart():
    """Each checkpoint source is a package of its own over the common weights machinery."""
    graph = import_graph()
    for source in WEIGHT_SOURCES:
        assert f"keras_vit.weights.{source}" in graph, source
    assert weights_violations(graph) == []



def private_borrowings(module, path, modules):
    """`module`'s uses of a private name (`_x`) of a keras_vit module outside its own folder:
    `from keras_vit.a.b import _x`, or `_x` read off a module imported under another name."""
    own = module.rsplit(".", 1)[0] if not path.endswith("__init__.py") else module
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), filename=path)
    aliases = {}  # local name -> keras_vit module imported under it
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module in modules:
            for alias in node.names:
                target = f"{node.module}.{alias.name}"
                if target in modules:
                    aliases[alias.asname or alias.name] = target
                elif alias.name.startswith("_") and not node.module.startswith(f"{own}."):
                    if node.module != own:
                        found.append(f"{module} imports {node.module}.{alias.name}")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname and alias.name in modules:
                    aliases[alias.asname] = alias.name
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in aliases
            and node.attr.startswith("_")
            and not node.attr.startswith("__")
        ):
            target = aliases[node.value.id]
            if target != own and not target.startswith(f"{own}."):
                found.append(f"{module} reads {target}.{node.attr}")
    return sorted(set(found))


@backend_independent
def test_private_borrowings_are_found(tmp_path):
    path = tmp_path / "reader.py"
    path.write_text(
        "from keras_vit.weights.timm.table import _hidden, fills\n"
        "from keras_vit.weights.huggingface import common as H\n"
        "from keras_vit.families.x import _own\n"
        "H._weights(1); H.read_config(1)\n"
    )
    modules = {m: "" for m in ("keras_vit.weights.timm.table", "keras_vit.weights.huggingface",
                               "keras_vit.weights.huggingface.common", "keras_vit.families.x")}
    assert private_borrowings("keras_vit.families.x.reader", str(path), modules) == [
        "keras_vit.families.x.reader imports keras_vit.weights.timm.table._hidden",
        "keras_vit.families.x.reader reads keras_vit.weights.huggingface.common._weights",
    ]  # fmt: skip


@backend_independent
def test_families_use_only_public_names_of_shared_modules():
    """A family folder uses what the shared machinery offers by its public names: a private
    name borrowed from outside the folder is a helper the shared module should offer (or the
    family should own), not a hidden tie (AIMv2 once took the timm table's private position
    transform, beside a different function of the same name in the transformers reader)."""
    modules = _modules()
    found = [
        row
        for module, path in sorted(modules.items())
        if module.startswith("keras_vit.families.") and module.count(".") >= 3
        for row in private_borrowings(module, path, modules)
    ]
    assert found == []


_LOAD_WITH_LAYERS_ONLY = """
import sys, numpy as np
import keras_vit.models  # the model class; its layers register through keras_vit.layers
import keras  # after: `import keras_vit` with Keras already imported would load the whole API
assert "keras_vit.weights" not in sys.modules and "keras_vit._api" not in sys.modules
model = keras.saving.load_model(sys.argv[1])
assert type(model).__name__ == "VisionTransformer", type(model)
registered = keras.saving.get_registered_object("keras_vit>StdConv2D")
assert registered is keras_vit.layers.StdConv2D, registered
np.testing.assert_array_equal(
    keras.ops.convert_to_numpy(model(np.load(sys.argv[2]))), np.load(sys.argv[3])
)
print(type(model.get_layer("conv_root")).__module__)
"""


def test_layers_package_alone_registers_std_conv(tmp_path):
    # The layers package imports every layer module itself (found, not listed: so no module
    # imports models.hybrid "to register it"), and a hybrid's .keras file loads after
    # `import keras_vit.models` (the model class), without the weights package or the API.
    import keras_vit.layers
    from keras_vit.layers import std_conv

    assert keras_vit.layers.StdConv2D is std_conv.StdConv2D and "StdConv2D" in std_conv.__all__
    model = ViT(
        "mu/1", resnet_units=(1,), resnet_width=8, resnet_groups=4, image_size=16, num_classes=3
    )
    x = np.random.default_rng(0).uniform(-1, 1, (2, 16, 16, 3)).astype("float32")
    paths = [str(tmp_path / name) for name in ("hybrid.keras", "x.npy", "y.npy")]
    model.save(paths[0])
    np.save(paths[1], x)
    np.save(paths[2], keras.ops.convert_to_numpy(model(x)))
    env = dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL="3")
    proc = subprocess.run(
        [sys.executable, "-c", _LOAD_WITH_LAYERS_ONLY, *paths],
        env=env,
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip().splitlines()[-1] == "keras_vit.layers.std_conv"


@backend_independent  # ruff reads the files; no Keras runs
def test_ruff_is_clean():
    """`ruff check` (pyproject.toml: E, F, W, I, B, UP) reports nothing in the repository."""
    ruff = shutil.which("ruff") or os.path.join(os.path.dirname(sys.executable), "ruff")
    if not os.path.exists(ruff):
        pytest.skip("ruff is not installed (it comes with the `dev` extra)")
    result = subprocess.run(
        [ruff, "check", "--no-cache", "."], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stdout + result.stderr
