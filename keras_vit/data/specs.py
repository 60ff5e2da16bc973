"""Dataset specs (`digits`, `folder:PATH`, `imagefolder:PATH`, `tfds:NAME[:SPLIT]`,
`synthetic[:CLASSES[:IMAGES[:SIZE]]]`): parsed and checked, nothing read."""

SCHEMES = {
    "folder": "folder:PATH",
    "imagefolder": "imagefolder:PATH",
    "tfds": "tfds:NAME[:SPLIT]",
    "synthetic": "synthetic[:CLASSES[:IMAGES[:SIZE]]]",
}
EXPECTED_SPECS = (
    "'digits', 'folder:PATH', 'imagefolder:PATH', 'tfds:NAME[:SPLIT]' or "
    "'synthetic[:CLASSES[:IMAGES[:SIZE]]]'"
)
# `synthetic` defaults: classes, training images, image size; the test split has IMAGES // 4.
SYNTHETIC_DEFAULTS = (10, 1024, 224)


def parse_spec(spec):
    """Splits a dataset spec into `(kind, argument)`.

    `"tfds:cifar10:train"` -> `("tfds", "cifar10:train")`; `"digits"` -> `("digits", None)`.
    Raises a `ValueError` naming the expected forms for an unknown scheme or an empty name.
    """
    if not isinstance(spec, str) or not spec.strip():
        raise ValueError(f"dataset must be a non-empty string. Received: dataset={spec!r}")
    if spec in ("digits", "synthetic"):
        return spec, None
    kind, sep, arg = spec.partition(":")
    if kind not in SCHEMES or not sep:
        raise ValueError(
            f"dataset must be {EXPECTED_SPECS}. Unknown dataset scheme {kind!r}. "
            f"Received: dataset={spec!r}"
        )
    if kind == "synthetic":
        parse_synthetic(arg, spec)
        return kind, arg
    what = "a dataset name" if kind == "tfds" else "a folder path"
    if not arg.strip() or (kind == "tfds" and not arg.partition(":")[0].strip()):
        raise ValueError(
            f"dataset {kind!r} needs {what} after '{kind}:' (expected {SCHEMES[kind]!r}). "
            f"Received: dataset={spec!r}"
        )
    return kind, arg


def parse_synthetic(arg, spec=None):
    """`(classes, images, size)` of a `synthetic[:CLASSES[:IMAGES[:SIZE]]]` spec's argument.

    `arg` is what follows `synthetic:` (None or `""` for the defaults `SYNTHETIC_DEFAULTS`).
    Raises a `ValueError` naming the expected form and the received spec.
    """
    spec = spec if spec is not None else f"synthetic:{arg}" if arg else "synthetic"
    parts = [p.strip() for p in arg.split(":")] if arg else []
    names = ("CLASSES", "IMAGES", "SIZE")
    expected = (
        f"expected {SCHEMES['synthetic']!r} with positive integers (CLASSES >= 2), "
        "e.g. 'synthetic:1000:8192:224'"
    )
    if len(parts) > len(names):
        raise ValueError(f"dataset {spec!r} has {len(parts)} fields: {expected}. "
                         f"Received: dataset={spec!r}")
    values = list(SYNTHETIC_DEFAULTS)
    for i, part in enumerate(parts):
        try:
            values[i] = int(part)
        except ValueError:
            values[i] = 0
        if values[i] < (2 if i == 0 else 1):
            raise ValueError(
                f"dataset {spec!r}: {names[i]} must be "
                f"{'an integer >= 2' if i == 0 else 'a positive integer'}, got {part!r}; "
                f"{expected}. Received: dataset={spec!r}"
            )
    return tuple(values)

