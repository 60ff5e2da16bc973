"""Named pretrained weights: `ViTB16(weights="imagenet21k")` and friends.

One table (`PRESET_TABLE`) maps a builder's variant code and a preset name to
an official checkpoint file of google-research/vision_transformer, with what
the file holds: input size, class count, whether it carries the pre-training
`pre_logits` layer, and what it was trained on. `keras_vit.list_presets()`
shows the table; every builder (`ViT`, `ViTB16`, `ViTR50B16`, ...) accepts the
names that exist for its variant as `weights=`.

Names:

- `"imagenet21k"`: the ViT paper's ImageNet-21k pre-training (224 px,
  21,843 classes, with `pre_logits`; the head is all zeros in these files,
  so use them as feature extractors or fine-tune them);
- `"imagenet21k+imagenet2012"`: those, fine-tuned on ImageNet-1k at 384 px;
  `"imagenet21k+imagenet2012_224"`: at 224 px (B/16 and L/16 only);
- `"augreg_in21k"`: the "How to train your ViT?" (AugReg) recommended
  ImageNet-21k checkpoints (224 px, 21,843 classes, no `pre_logits`);
  `"augreg_in21k_ft_in1k_384"`: their ImageNet-1k fine-tunes at 384 px (the
  official README's table); `"augreg_in21k_ft_in1k"`: fine-tunes of the same
  pre-training at 224 px, where such a file is known.

Files are downloaded by `keras.utils.get_file` into the Keras cache
(`$KERAS_HOME`, default `~/.keras`) under `keras_vit/`, mirroring the bucket
layout (`~/.keras/keras_vit/imagenet21k/ViT-B_16.npz`), so a mirror of the
bucket can serve as the base URL (`KERAS_VIT_WEIGHTS_URL`, or `base_url=`; a
`file://` URL works too) and a file copied by hand to that path is used as is.
`keras_vit.weights.presets.download` adds what get_file lacks (a fast offline error,
cached files checked and never replaced unasked); `npz.check_npz` checks the
zip archive, and the strict loader (`load_npz`) every array's name and shape.

Reference:
    github.com/google-research/vision_transformer README ("Available ViT
    models"); Steiner et al., 2022, "How to train your ViT? Data, Augmentation,
    and Regularization in Vision Transformers", Table 3 (`i21k_300` column).
"""

import dataclasses
import os
import urllib.parse

import numpy as np

from keras_vit.layers._checks import check_bool
from keras_vit.models import variants
from keras_vit.models.pretrained import WEIGHT_SUFFIXES
from keras_vit.weights.npz import checkpoints as npz
from keras_vit.weights.presets import download
from keras_vit.weights.presets.download import CONNECT_TIMEOUT, cache_root, hash_algorithm

DEFAULT_BASE_URL = "https://storage.googleapis.com/vit_models/"
BASE_URL_ENV = "KERAS_VIT_WEIGHTS_URL"
CACHE_SUBDIR = "keras_vit"

IN21K_CLASSES = 21843
IN1K_CLASSES = 1000

_ORIGINAL = "ImageNet-21k (ViT paper)"
_ORIGINAL_FT = "ImageNet-21k (ViT paper), fine-tuned on ImageNet-1k at {} px"
_AUGREG = "ImageNet-21k, 300 epochs, AugReg recommended checkpoint"
_AUGREG_FT = "ImageNet-21k, 300 epochs, AugReg; fine-tuned on ImageNet-1k at {} px"
_AR = "augreg/"
_FT = "--imagenet2012-steps_20k-"

# The ViT paper's files, in the bucket folders `imagenet21k/` (224 px, with
# pre_logits) and `imagenet21k+imagenet2012/` (384 px fine-tunes; `-224` files
# at 224 px). Per variant: is there a 384 px fine-tune, and the top-1 of the
# 224 px one (None: no such file).
# fmt: off
_ORIGINAL_FILES = (
    # variant     384 px fine-tune   224 px fine-tune top-1
    ("B/16",      True,              81.2),
    ("B/32",      True,              None),
    ("L/16",      True,              82.7),
    ("L/32",      True,              None),
    ("H/14",      False,             None),
    ("R50+B/16",  True,              None),
    ("R26+B/32",  False,             None),
    ("R50+L/32",  False,             None),
)
# The AugReg runs: the recommended pre-training (official README table,
# `i21k_300`: `{stem}-i21k-300ep-lr_0.001-aug_{aug}-wd_{wd}-do_{drop}-sd_{drop}`,
# listed as `augreg_in21k` when `listed`), and the fine-tunes of it that are
# known: learning rate of the 224 px one, (learning rate, top-1) of the 384 px
# one. B/8's pre-training is not in the README table.
_AUGREG_RUNS = (
    # variant    stem        aug        wd    drop  listed  224 px  384 px
    ("Ti/16",    "Ti_16",    "none",    0.03, 0.0,  True,   0.03,   (0.03, 78.22)),
    ("S/16",     "S_16",     "light1",  0.03, 0.0,  True,   0.03,   (0.03, 83.73)),
    ("S/32",     "S_32",     "none",    0.1,  0.0,  True,   None,   (0.01, 79.58)),
    ("B/16",     "B_16",     "medium1", 0.1,  0.0,  True,   0.01,   (0.03, 85.49)),
    ("B/32",     "B_32",     "light1",  0.1,  0.0,  True,   None,   (0.01, 83.59)),
    ("B/8",      "B_8",      "medium1", 0.1,  0.0,  False,  0.01,   None),
    ("L/16",     "L_16",     "strong1", 0.1,  0.0,  True,   None,   (0.01, 85.59)),
    ("R+Ti/16",  "R_Ti_16",  "none",    0.03, 0.0,  True,   0.03,   (0.03, 75.40)),
    ("R26+S/32", "R26_S_32", "light1",  0.1,  0.0,  True,   None,   (0.01, 83.85)),
    ("R50+L/32", "R50_L_32", "medium1", 0.1,  0.1,  True,   0.01,   (0.01, 85.99)),
)
# fmt: on


def _vit_file(variant):
    """The file name of the ViT paper's checkpoints: "R50+B/16" -> "R50+ViT-B_16"."""
    stem, plus, size = variant.rpartition("+")
    return f"{stem}{plus}ViT-{size.replace('/', '_')}"


def _official_rows():
    """The rows of the ViT paper's files, in the order of the official README."""
    in21k, in1k = "imagenet21k", "imagenet21k+imagenet2012"
    for code, _, _ in _ORIGINAL_FILES:
        path = f"{in21k}/{_vit_file(code)}.npz"
        yield (code, in21k, path, 224, IN21K_CLASSES, True, _ORIGINAL, None)
    for code, at_384, _ in _ORIGINAL_FILES:
        if at_384:
            path = f"{in1k}/{_vit_file(code)}.npz"
            yield (code, in1k, path, 384, IN1K_CLASSES, False, _ORIGINAL_FT.format(384), None)
    for code, _, top1 in _ORIGINAL_FILES:
        if top1 is not None:
            path = f"{in1k}/{_vit_file(code)}-224.npz"
            trained_on = _ORIGINAL_FT.format(224)
            yield (code, f"{in1k}_224", path, 224, IN1K_CLASSES, False, trained_on, top1)


def _augreg_rows():
    """The rows of the AugReg files: per variant, pre-training, then 224 and 384 px fine-tunes."""
    for code, stem, aug, wd, drop, listed, lr_224, at_384 in _AUGREG_RUNS:
        run = f"{stem}-i21k-300ep-lr_0.001-aug_{aug}-wd_{wd}-do_{drop}-sd_{drop}"
        if listed:
            yield (code, "augreg_in21k", f"{_AR}{run}.npz", 224, IN21K_CLASSES, False, _AUGREG)
        fine_tunes = [(224, lr_224, None, "")] if lr_224 else []
        fine_tunes += [(384, *at_384, "_384")] if at_384 else []
        for res, lr, top1, suffix in fine_tunes:
            path = f"{_AR}{run}{_FT}lr_{lr}-res_{res}.npz"
            trained_on = _AUGREG_FT.format(res)
            name = "augreg_in21k_ft_in1k" + suffix
            yield (code, name, path, res, IN1K_CLASSES, False, trained_on, top1)


# The table: (variant, name, path under the base URL, px, classes, pre_logits,
# trained on, top1). top1: ImageNet-1k top-1 (%) as the official README reports
# it for that very file (None where it reports none). pre_logits: the file
# carries the pre-training Dense+tanh layer (width = hidden size). No file hash
# is listed yet (no digest of the official files could be verified when this
# table was written): one must come from `sha256sum` of a good copy, given with
# `register_preset(..., file_hash=)`.
PRESET_TABLE = tuple(_official_rows()) + tuple(_augreg_rows())


@dataclasses.dataclass(frozen=True)
class Preset:
    """One named checkpoint: where it lives and what it holds.

    Attributes:
        variant: str. Builder variant code (`"B/16"`, `"R50+B/16"`, ...).
        name: str. Preset name accepted as `weights=` by that builder.
        path: str. File path under the base URL (and under the cache folder).
        image_size: int. Resolution the checkpoint was trained at.
        num_classes: int. Classes of its head (21843 for ImageNet-21k).
        pre_logits: bool. Whether the file carries the pre-training
            `pre_logits` layer (Dense + tanh, width = hidden size).
        trained_on: str. Training data and recipe, in words.
        top1: optional float. ImageNet-1k top-1 (%) the official repository
            reports for this file.
        file_hash: optional str. The file's sha256 (64 hex digits) or md5
            (32), checked after each download (a mismatch removes the file)
            and on each use of a cached file (a mismatch is reported).
    """

    variant: str
    name: str
    path: str
    image_size: int
    num_classes: int
    pre_logits: bool
    trained_on: str
    top1: float = None
    file_hash: str = None

    def __post_init__(self):
        object.__setattr__(self, "pre_logits", check_bool(self.pre_logits, "pre_logits"))
        if self.file_hash is not None:
            hash_algorithm(self.file_hash)  # raises on a malformed digest

    def url(self, base_url=None):
        """The download URL: `base_url` (else `$KERAS_VIT_WEIGHTS_URL`, else the bucket) + path."""
        return resolve_base_url(base_url) + urllib.parse.quote(self.path, safe="/")

    def cache_path(self, cache_dir=None):
        """Where the file is kept in the Keras cache (and where to put it by hand)."""
        return os.path.join(cache_root(cache_dir), CACHE_SUBDIR, *self.path.split("/"))


_REGISTRY = {}


def register_preset(preset, *, overwrite=False, file_hash=None):
    """Adds a `Preset` to the table (for mirrors with extra files, and for tests).

    Args:
        preset: a `Preset`.
        overwrite: bool. Replace an existing entry with the same variant and
            name. Defaults to False.
        file_hash: optional str. sha256 (or md5) of the file; replaces
            `preset.file_hash`. Defaults to None (keep the preset's).

    Returns:
        The preset as registered.
    """
    if not isinstance(preset, Preset):
        raise ValueError(f"preset must be a keras_vit.Preset. Received: {preset!r}")
    overwrite = check_bool(overwrite, "overwrite")
    if file_hash is not None:
        preset = dataclasses.replace(preset, file_hash=file_hash)
    variants.parse_variant(preset.variant)  # raises on an unknown code
    key = (preset.variant, preset.name)
    if key in _REGISTRY and not overwrite:
        raise ValueError(
            f"A preset {preset.name!r} for {preset.variant!r} exists already; "
            "pass overwrite=True to replace it."
        )
    if preset.name.endswith(WEIGHT_SUFFIXES):
        raise ValueError(
            f"A preset name cannot end with {WEIGHT_SUFFIXES} (read as a file path). "
            f"Received: name={preset.name!r}"
        )
    _REGISTRY[key] = preset
    return preset


def unregister_preset(variant, name):
    """Removes a preset added with `register_preset`; returns it."""
    return _REGISTRY.pop((variant, name))


for _row in PRESET_TABLE:
    register_preset(Preset(*_row))
del _row


def list_presets(variant=None):
    """Lists the named pretrained weights, for one builder variant or all.

    Args:
        variant: optional str. A variant code (`"B/16"`, `"R50+B/16"`); None
            lists every preset. Defaults to None.

    Returns:
        list of `Preset` records (variant, name, path, image_size,
        num_classes, pre_logits, trained_on, top1) in table order.

    Example:

    >>> [p.name for p in list_presets("B/16")][:3]
    ['imagenet21k', 'imagenet21k+imagenet2012', 'imagenet21k+imagenet2012_224']
    """
    if variant is None:
        return list(_REGISTRY.values())
    variants.parse_variant(variant)  # raises on an unknown code
    return [p for p in _REGISTRY.values() if p.variant == variant]


def get_preset(variant, name):
    """Returns the `Preset` called `name` for `variant`.

    Raises:
        ValueError: for an unknown name, listing the valid names for `variant`.
    """
    preset = _REGISTRY.get((variant, name))
    if preset is not None:
        return preset
    names = [p.name for p in list_presets(variant)]
    if names:
        valid = f"Valid names for {variant!r}: {names}"
    else:
        with_weights = sorted({p.variant for p in _REGISTRY.values()})
        valid = f"There are no named weights for {variant!r}; variants with weights: {with_weights}"
    raise ValueError(
        f"Unknown pretrained weights {name!r} for {variant!r}. {valid}. (weights must be None "
        f"or a path to a {' or '.join(WEIGHT_SUFFIXES)} file, or a preset name of this builder.)"
    )


def resolve_base_url(base_url=None):
    """`base_url`, else `$KERAS_VIT_WEIGHTS_URL`, else the official bucket; ends with "/"."""
    url = base_url or os.environ.get(BASE_URL_ENV) or DEFAULT_BASE_URL
    return url if url.endswith("/") else url + "/"


def _by_hand(url, target):
    return (
        f"To use the file offline, download {url} yourself (or copy it from a mirror; "
        f"`wget -c` resumes a large file) and put it at {target} ; or point {BASE_URL_ENV} "
        "(or base_url=) to a mirror of the bucket."
    )


def get_preset_file(
    name,
    variant,
    *,
    base_url=None,
    cache_dir=None,
    force_download=False,
    timeout=CONNECT_TIMEOUT,
    file_hash=None,
):
    """Returns the local path of a preset's checkpoint, downloading it once into the Keras cache.

    The file is downloaded by `keras.utils.get_file` (with a progress bar)
    from `base_url` + the preset's path to `{cache}/keras_vit/{path}`; later
    calls use the cached file without touching the network. A transfer that
    fails leaves no file behind (the next call starts again). A file copied
    into the cache by hand is used as is.

    Verification: the sha256 or md5 (`file_hash`, else the preset's) after
    the download and on every cache hit, then the zip archive (every
    member's CRC after a download). A downloaded file failing a check is
    removed; a cached one is reported and left as it is (delete it, or pass
    `force_download=True`).

    Args:
        name: str. Preset name (see `list_presets(variant)`).
        variant: str. Builder variant code, e.g. `"B/16"`.
        base_url: optional str. Where the bucket layout is served: an
            `https://`, `http://` or `file://` URL. Defaults to
            `$KERAS_VIT_WEIGHTS_URL`, else the official bucket.
        cache_dir: optional str. Cache root; defaults to `$KERAS_HOME`, else
            `~/.keras`.
        force_download: bool. Download again even when cached, replacing the
            cached file. Defaults to False.
        timeout: float. Seconds to reach the host before failing (offline).
            Defaults to 3.
        file_hash: optional str. Expected sha256 (64 hex digits) or md5 (32)
            of the file; replaces the preset's. Defaults to None.

    Returns:
        str, the path of the checked `.npz` file.

    Raises:
        ValueError: unknown preset name (listing the valid ones), a malformed
            `file_hash`, or a file whose digest differs from the expected one
            or that is not a readable `.npz` (the message names both digests,
            the file, and what to do).
        ConnectionError: the file is not cached and cannot be fetched; the
            message names the URL and where to put the file by hand.
    """
    force_download = check_bool(force_download, "force_download")
    preset = get_preset(variant, name)
    url = preset.url(base_url)
    target = preset.cache_path(cache_dir)
    return download.fetch(
        url,
        target,
        file_hash=file_hash or preset.file_hash,
        force_download=force_download,
        timeout=timeout,
        check=npz.check_npz,
        label=f"preset {name!r} of {variant!r}",
        hint=_by_hand(url, target),
    )


def _file_head(path):
    """(head classes, pre_logits width) of a checkpoint, None where absent; reads only those."""
    found = {}
    with np.load(path, allow_pickle=False) as data:
        for name in data.files:
            for leaf in ("head/kernel", "pre_logits/kernel"):
                if name == leaf or name in (p + leaf for p in npz.PREFIXES):
                    found[leaf] = int(data[name].shape[-1])
    return found.get("head/kernel"), found.get("pre_logits/kernel")


def resolve_builder_weights(
    variant, weights, *, image_size, num_classes, include_top, representation_size
):
    """What `ViT(variant, weights=<preset name>, ...)` builds and loads.

    Fetches the preset's file and fills the arguments the user left as None:
    `image_size` and `num_classes` default to the preset's. With the
    preset's own class count, `representation_size` defaults to the file's
    `pre_logits` width (the ImageNet-21k originals: the full pre-training
    head). With another class count the head is new and `pre_logits` is
    dropped unless `representation_size` is given (the paper's fine-tuning).

    Returns:
        `(path, image_size, num_classes, representation_size)`.
    """
    preset = get_preset(variant, weights)
    path = get_preset_file(weights, variant)
    if image_size is None:
        image_size = preset.image_size
    if num_classes is None:
        num_classes = preset.num_classes
    if include_top and representation_size is None and num_classes == preset.num_classes:
        file_classes, pre_logits = _file_head(path)
        if pre_logits is not None and file_classes == num_classes:
            representation_size = pre_logits
    return path, image_size, num_classes, representation_size
