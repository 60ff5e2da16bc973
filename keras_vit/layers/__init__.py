"""keras_vit layers: every one registered for `.keras` serialization.

Every public module of this package (a name without a leading `_`) is imported here, found, not
listed, so that every layer class registers itself with Keras and every block kind with
`BLOCK_KINDS`; the names each module lists in its `__all__` are this package's public names. A
new layer is a new module with an `__all__`: nothing here changes.
"""

import importlib as _importlib
import pkgutil as _pkgutil


def _public_modules():
    return sorted(
        info.name for info in _pkgutil.iter_modules(__path__) if not info.name.startswith("_")
    )


def _export_every_module():
    exported = {}  # name -> the module exporting it
    for module_name in _public_modules():
        module = _importlib.import_module(f"{__name__}.{module_name}")
        for name in getattr(module, "__all__", ()):
            if name in exported:
                raise ImportError(
                    f"keras_vit.layers.{module_name} and keras_vit.layers.{exported[name]} "
                    f"both export {name!r}."
                )
            exported[name] = module_name
            globals()[name] = getattr(module, name)
    return sorted(exported)


__all__ = _export_every_module()
