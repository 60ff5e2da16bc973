"""The package's shape: no import cycle between keras_vit modules; layers register on import."""

import ast
import os


ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = os.path.join(ROOT, "keras_vit")

# The coordinator removes this exception after merge: export.py imports from the top-level
# package today, and another branch turns it into a package that imports only from below.
KNOWN_EDGES = {("keras_vit.export", "keras_vit")}


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


def _imports(module, path, modules):
    """The keras_vit modules that `module` imports anywhere (inside functions too)."""
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
            continue
        for name in names:
            if name in modules and name != module:
                found.add(name)
    return found


def import_graph():
    modules = _modules()
    return {
        module: {
            target
            for target in _imports(module, path, modules)
            if (module, target) not in KNOWN_EDGES
        }
        for module, path in modules.items()
    }


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
