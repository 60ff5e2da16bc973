"""`public_names`: a package's `__all__`, derived from what it imports (written once)."""

import types


def public_names(namespace):
    """The sorted public names of a package namespace: everything bound but modules.

    Subpackages and modules are left out (Python binds them as a side effect of importing from
    them; they stay reachable as attributes), as are private names; `__version__` is kept.

    Args:
        namespace: dict, a package's `globals()` after its imports.

    Returns:
        A sorted list of str, the package's `__all__`.

    Example:

    >>> public_names({"ViT": object, "_x": 1, "types": types, "__version__": "0"})
    ['ViT', '__version__']
    """
    return sorted(
        name
        for name, value in namespace.items()
        if (name == "__version__" or not name.startswith("_"))
        and not isinstance(value, types.ModuleType)
    )
