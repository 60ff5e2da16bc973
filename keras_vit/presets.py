"""Named pretrained weights: `ViTB16(weights="imagenet21k")` and friends.

One table (`PRESET_TABLE`) maps a builder's variant code and a preset name to
an official checkpoint file of google-research/vision_transformer, with what
the file holds: input size, class count, whether it carries the pre-training
`pre_logits` layer, and what it was trained on. `keras_vit.list_weights()`
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

Files are downloaded into the Keras cache (`$KERAS_HOME`, default `~/.keras`)
under `keras_vit/`, mirroring the bucket layout
(`~/.keras/keras_vit/imagenet21k/ViT-B_16.npz`, the path `keras.utils.get_file`
used before), so a mirror of the bucket can serve as the base URL
(`KERAS_VIT_WEIGHTS_URL`, or `base_url=`; a `file://` URL works too) and a file
copied by hand to that path is used as is. A download goes into
`<file>.part` with a progress bar and resumes where it stopped (an HTTP
`Range` request): a dropped connection is retried a few times within one call,
and what arrived is kept for the next call. Every file is checked before use:
the sha256 (or md5) of the table or of `file_hash=` when known, then the zip
archive and every member's CRC; a corrupt file is deleted from the cache with
an error that says how to retry. A `<file>.sha256` sidecar (the format
`sha256sum -c` reads) records each verified file's digest, size and
modification time, so a cached file rewritten since (a partial copy, a
restore) is caught without a download: a cache hit compares size and time
with the sidecar and hashes again only when they differ. (Bytes that rot in
place, same size and time, fail the zip CRC when `load_npz` reads them.) When the host cannot be reached within a few seconds and the file
is not cached, the error says where to put it by hand. The strict checkpoint
loader (`load_npz`) then checks every array's name and shape.

Reference:
    github.com/google-research/vision_transformer README ("Available ViT
    models"); Steiner et al., 2022, "How to train your ViT? Data, Augmentation,
    and Regularization in Vision Transformers", Table 3 (`i21k_300` column).
"""

import dataclasses
import hashlib
import http.client
import os
import re
import socket
import ssl
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import zipfile

import numpy as np

DEFAULT_BASE_URL = "https://storage.googleapis.com/vit_models/"
BASE_URL_ENV = "KERAS_VIT_WEIGHTS_URL"
CACHE_SUBDIR = "keras_vit"
CONNECT_TIMEOUT = 3.0  # seconds to reach the host before giving up (offline)
READ_TIMEOUT = 60.0  # seconds without data before a started download gives up
DOWNLOAD_ATTEMPTS = 3  # requests per call before a dropped download is left for the next call
RETRY_WAIT = 1.0  # seconds before the second attempt (then 2x, 3x, ...)
CHUNK_SIZE = 1 << 20
PART_SUFFIX = ".part"  # a download in progress: `<file>.part`, renamed once verified
SIDECAR_SUFFIX = ".sha256"  # `<file>.sha256`: digest, size and mtime of the verified file
RETRY_STATUS = (408, 429, 500, 502, 503, 504)  # HTTP answers worth another attempt
WEIGHT_SUFFIXES = (".npz", ".weights.h5")

IN21K_CLASSES = 21843
IN1K_CLASSES = 1000

_ORIGINAL = "ImageNet-21k (ViT paper)"
_ORIGINAL_FT = "ImageNet-21k (ViT paper), fine-tuned on ImageNet-1k at {} px"
_AUGREG = "ImageNet-21k, 300 epochs, AugReg recommended checkpoint"
_AUGREG_FT = "ImageNet-21k, 300 epochs, AugReg; fine-tuned on ImageNet-1k at {} px"
_AR = "augreg/"
_FT = "--imagenet2012-steps_20k-"
# The AugReg recommended pre-training runs (official README table, `i21k_300`).
_UP = {
    "Ti/16": "Ti_16-i21k-300ep-lr_0.001-aug_none-wd_0.03-do_0.0-sd_0.0",
    "S/16": "S_16-i21k-300ep-lr_0.001-aug_light1-wd_0.03-do_0.0-sd_0.0",
    "S/32": "S_32-i21k-300ep-lr_0.001-aug_none-wd_0.1-do_0.0-sd_0.0",
    "B/16": "B_16-i21k-300ep-lr_0.001-aug_medium1-wd_0.1-do_0.0-sd_0.0",
    "B/32": "B_32-i21k-300ep-lr_0.001-aug_light1-wd_0.1-do_0.0-sd_0.0",
    "L/16": "L_16-i21k-300ep-lr_0.001-aug_strong1-wd_0.1-do_0.0-sd_0.0",
    "R+Ti/16": "R_Ti_16-i21k-300ep-lr_0.001-aug_none-wd_0.03-do_0.0-sd_0.0",
    "R26+S/32": "R26_S_32-i21k-300ep-lr_0.001-aug_light1-wd_0.1-do_0.0-sd_0.0",
    "R50+L/32": "R50_L_32-i21k-300ep-lr_0.001-aug_medium1-wd_0.1-do_0.1-sd_0.1",
}
# B/8's 224 px fine-tune (its pre-training is not in the README table).
_B8 = "B_8-i21k-300ep-lr_0.001-aug_medium1-wd_0.1-do_0.0-sd_0.0"


def _augreg(code, name, res=None, lr=None, top1=None, sha256=None):
    if res is None:
        path = f"{_AR}{_UP[code]}.npz"
        return (code, name, path, 224, IN21K_CLASSES, False, _AUGREG, None, sha256)
    path = f"{_AR}{_UP.get(code, _B8)}{_FT}lr_{lr}-res_{res}.npz"
    return (code, name, path, res, IN1K_CLASSES, False, _AUGREG_FT.format(res), top1, sha256)


# The table. top1: ImageNet-1k top-1 (%) as the official README reports it for
# that very file (None where it reports none). pre_logits: the file carries the
# pre-training Dense+tanh layer (width = hidden size). A row may end with a
# ninth item, the file's sha256 (64 hex digits), checked after each download;
# none is listed yet (no digest of the official files could be verified when
# this table was written): one must come from `sha256sum` of a good copy.
# fmt: off
PRESET_TABLE = (
    # variant     name                            path (under the base URL)                         px   classes        pre_logits trained on            top1
    ("B/16",     "imagenet21k",                  "imagenet21k/ViT-B_16.npz",                      224, IN21K_CLASSES, True,  _ORIGINAL,               None),
    ("B/32",     "imagenet21k",                  "imagenet21k/ViT-B_32.npz",                      224, IN21K_CLASSES, True,  _ORIGINAL,               None),
    ("L/16",     "imagenet21k",                  "imagenet21k/ViT-L_16.npz",                      224, IN21K_CLASSES, True,  _ORIGINAL,               None),
    ("L/32",     "imagenet21k",                  "imagenet21k/ViT-L_32.npz",                      224, IN21K_CLASSES, True,  _ORIGINAL,               None),
    ("H/14",     "imagenet21k",                  "imagenet21k/ViT-H_14.npz",                      224, IN21K_CLASSES, True,  _ORIGINAL,               None),
    ("R50+B/16", "imagenet21k",                  "imagenet21k/R50+ViT-B_16.npz",                  224, IN21K_CLASSES, True,  _ORIGINAL,               None),
    ("R26+B/32", "imagenet21k",                  "imagenet21k/R26+ViT-B_32.npz",                  224, IN21K_CLASSES, True,  _ORIGINAL,               None),
    ("R50+L/32", "imagenet21k",                  "imagenet21k/R50+ViT-L_32.npz",                  224, IN21K_CLASSES, True,  _ORIGINAL,               None),
    ("B/16",     "imagenet21k+imagenet2012",     "imagenet21k+imagenet2012/ViT-B_16.npz",         384, IN1K_CLASSES,  False, _ORIGINAL_FT.format(384), None),
    ("B/32",     "imagenet21k+imagenet2012",     "imagenet21k+imagenet2012/ViT-B_32.npz",         384, IN1K_CLASSES,  False, _ORIGINAL_FT.format(384), None),
    ("L/16",     "imagenet21k+imagenet2012",     "imagenet21k+imagenet2012/ViT-L_16.npz",         384, IN1K_CLASSES,  False, _ORIGINAL_FT.format(384), None),
    ("L/32",     "imagenet21k+imagenet2012",     "imagenet21k+imagenet2012/ViT-L_32.npz",         384, IN1K_CLASSES,  False, _ORIGINAL_FT.format(384), None),
    ("R50+B/16", "imagenet21k+imagenet2012",     "imagenet21k+imagenet2012/R50+ViT-B_16.npz",     384, IN1K_CLASSES,  False, _ORIGINAL_FT.format(384), None),
    ("B/16",     "imagenet21k+imagenet2012_224", "imagenet21k+imagenet2012/ViT-B_16-224.npz",     224, IN1K_CLASSES,  False, _ORIGINAL_FT.format(224), 81.2),
    ("L/16",     "imagenet21k+imagenet2012_224", "imagenet21k+imagenet2012/ViT-L_16-224.npz",     224, IN1K_CLASSES,  False, _ORIGINAL_FT.format(224), 82.7),
    # AugReg: variant, name, [fine-tune resolution, fine-tune learning rate, top-1 (README)]
    _augreg("Ti/16",    "augreg_in21k"),
    _augreg("Ti/16",    "augreg_in21k_ft_in1k",     224, 0.03),
    _augreg("Ti/16",    "augreg_in21k_ft_in1k_384", 384, 0.03, 78.22),
    _augreg("S/16",     "augreg_in21k"),
    _augreg("S/16",     "augreg_in21k_ft_in1k",     224, 0.03),
    _augreg("S/16",     "augreg_in21k_ft_in1k_384", 384, 0.03, 83.73),
    _augreg("S/32",     "augreg_in21k"),
    _augreg("S/32",     "augreg_in21k_ft_in1k_384", 384, 0.01, 79.58),
    _augreg("B/16",     "augreg_in21k"),
    _augreg("B/16",     "augreg_in21k_ft_in1k",     224, 0.01),
    _augreg("B/16",     "augreg_in21k_ft_in1k_384", 384, 0.03, 85.49),
    _augreg("B/32",     "augreg_in21k"),
    _augreg("B/32",     "augreg_in21k_ft_in1k_384", 384, 0.01, 83.59),
    _augreg("B/8",      "augreg_in21k_ft_in1k",     224, 0.01),
    _augreg("L/16",     "augreg_in21k"),
    _augreg("L/16",     "augreg_in21k_ft_in1k_384", 384, 0.01, 85.59),
    _augreg("R+Ti/16",  "augreg_in21k"),
    _augreg("R+Ti/16",  "augreg_in21k_ft_in1k",     224, 0.03),
    _augreg("R+Ti/16",  "augreg_in21k_ft_in1k_384", 384, 0.03, 75.40),
    _augreg("R26+S/32", "augreg_in21k"),
    _augreg("R26+S/32", "augreg_in21k_ft_in1k_384", 384, 0.01, 83.85),
    _augreg("R50+L/32", "augreg_in21k"),
    _augreg("R50+L/32", "augreg_in21k_ft_in1k",     224, 0.01),
    _augreg("R50+L/32", "augreg_in21k_ft_in1k_384", 384, 0.01, 85.99),
)
# fmt: on


def _hash_algorithm(file_hash):
    """Returns "sha256" or "md5" by the length of a hex digest; raises ValueError otherwise."""
    if isinstance(file_hash, str) and re.fullmatch(r"[0-9a-fA-F]+", file_hash):
        if len(file_hash) == 64:
            return "sha256"
        if len(file_hash) == 32:
            return "md5"
    raise ValueError(
        "file_hash must be a sha256 (64 hex digits) or md5 (32 hex digits) digest. "
        f"Received: file_hash={file_hash!r}"
    )


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
            (32), checked after each download and on the first use of a
            file found in the cache; a mismatch removes the file.
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
        if self.file_hash is not None:
            _hash_algorithm(self.file_hash)  # raises on a malformed digest

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
        raise ValueError(f"preset must be a keras_vit.presets.Preset. Received: {preset!r}")
    if file_hash is not None:
        preset = dataclasses.replace(preset, file_hash=file_hash)
    from keras_vit.models import variants

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


def list_weights(variant=None):
    """Lists the named pretrained weights, for one builder variant or all.

    Args:
        variant: optional str. A variant code (`"B/16"`, `"R50+B/16"`); None
            lists every preset. Defaults to None.

    Returns:
        list of `Preset` records (variant, name, path, image_size,
        num_classes, pre_logits, trained_on, top1) in table order.

    Example:

    >>> [p.name for p in list_weights("B/16")][:3]
    ['imagenet21k', 'imagenet21k+imagenet2012', 'imagenet21k+imagenet2012_224']
    """
    if variant is None:
        return list(_REGISTRY.values())
    from keras_vit.models import variants

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
    names = [p.name for p in list_weights(variant)]
    if names:
        valid = f"Valid names for {variant!r}: {names}"
    else:
        with_weights = sorted({p.variant for p in _REGISTRY.values()})
        valid = f"There are no named weights for {variant!r}; variants with weights: {with_weights}"
    raise ValueError(
        f"Unknown pretrained weights {name!r} for {variant!r}. {valid}. (weights must be None "
        f"or a path to a {' or '.join(WEIGHT_SUFFIXES)} file, or a preset name of this builder.)"
    )


def is_preset_name(weights):
    """True when `weights` should be read as a preset name (a str that is not a weights path)."""
    return (
        isinstance(weights, str)
        and not weights.endswith(WEIGHT_SUFFIXES)
        and not os.path.exists(weights)
    )


def cache_root(cache_dir=None):
    """The Keras cache folder: `cache_dir`, else `$KERAS_HOME` (read now), else `~/.keras`."""
    if cache_dir is not None:
        return os.fspath(cache_dir)
    if "KERAS_HOME" in os.environ:
        return os.environ["KERAS_HOME"]
    home = os.path.expanduser("~")
    return os.path.join(home if os.access(home, os.W_OK) else "/tmp", ".keras")


def resolve_base_url(base_url=None):
    """`base_url`, else `$KERAS_VIT_WEIGHTS_URL`, else the official bucket; ends with "/"."""
    url = base_url or os.environ.get(BASE_URL_ENV) or DEFAULT_BASE_URL
    return url if url.endswith("/") else url + "/"


def _by_hand(preset, url, target):
    return (
        f"To use the file offline, download {url} yourself (or copy it from a mirror) and put "
        f"it at {target} ; or point {BASE_URL_ENV} (or base_url=) to a mirror of the bucket."
    )


def _probe(url, timeout):
    """Raises OSError when the URL's host (or its proxy) accepts no connection within `timeout` s.

    The look-up and the connection run in a helper thread, so that a stalled
    DNS resolver cannot hold the caller longer than the timeout either.
    """
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https"):
        return
    host, port = parts.hostname, parts.port or (443 if parts.scheme == "https" else 80)
    proxy = urllib.request.getproxies().get(parts.scheme)
    if proxy and not urllib.request.proxy_bypass(host):
        proxy_parts = urllib.parse.urlsplit(proxy if "://" in proxy else "http://" + proxy)
        host, port = proxy_parts.hostname, proxy_parts.port or 80
    outcome = []

    def connect():
        try:
            socket.create_connection((host, port), timeout=timeout).close()
            outcome.append(None)
        except OSError as error:
            outcome.append(error)

    thread = threading.Thread(target=connect, daemon=True)
    thread.start()
    thread.join(timeout + 1.0)
    if not outcome:
        raise TimeoutError(f"no answer from {host}:{port} within {timeout:g} s")
    if outcome[0] is not None:
        raise outcome[0]


def _check_file(path, deep):
    """Returns None when `path` is a readable .npz, else the reason it is not."""
    try:
        if not zipfile.is_zipfile(path):
            return "not a zip archive (truncated download or an HTML error page?)"
        with zipfile.ZipFile(path) as archive:
            if deep:
                bad = archive.testzip()  # reads every member and checks its CRC
                if bad is not None:
                    return f"member {bad!r} fails its CRC check"
        with np.load(path, allow_pickle=False) as data:
            if not data.files:
                return "it holds no arrays"
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as error:
        return f"{type(error).__name__}: {error}"
    return None


def _digests(path, algorithms):
    """{algorithm: hex digest} of the file at `path`, reading it once."""
    hashers = {name: hashlib.new(name) for name in algorithms}
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(CHUNK_SIZE), b""):
            for hasher in hashers.values():
                hasher.update(block)
    return {name: hasher.hexdigest() for name, hasher in hashers.items()}


def _read_sidecar(path):
    """(sha256, size, mtime_ns) recorded in `path + ".sha256"`; None when absent or unreadable."""
    try:
        with open(path + SIDECAR_SUFFIX, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError):
        return None
    digest = re.match(r"([0-9a-f]{64}) [ *]", text)
    record = re.search(r"^# size=(\d+) mtime_ns=(\d+)", text, flags=re.MULTILINE)
    if digest is None or record is None:
        return None
    return digest.group(1), int(record.group(1)), int(record.group(2))


def _write_sidecar(path, sha256):
    """Records the verified file's sha256, size and mtime next to it (`sha256sum -c` reads it).

    A read-only cache (a shared, air-gapped one) only loses the shortcut: the
    next use verifies the file again.
    """
    stat = os.stat(path)
    text = (
        f"{sha256}  {os.path.basename(path)}\n"
        f"# size={stat.st_size} mtime_ns={stat.st_mtime_ns} (keras_vit: verified file; "
        "when the file's size or time differ, it is hashed again)\n"
    )
    try:
        with open(path + SIDECAR_SUFFIX, "w", encoding="utf-8") as f:
            f.write(text)
    except OSError:
        pass


def _remove(path):
    """Deletes `path` and its sidecar; returns what to tell the user."""
    try:
        os.remove(path)
        removed = "it was removed from the cache"
    except OSError as error:
        removed = f"removing it failed ({error}); delete it by hand"
    try:
        os.remove(path + SIDECAR_SUFFIX)
    except OSError:
        pass
    return removed


def _fail_corrupt(preset, url, path, reason):
    removed = _remove(path)
    raise ValueError(
        f"The weights file {path} (preset {preset.name!r} of {preset.variant!r}, from {url}) is "
        f"corrupt or incomplete: {reason}; {removed}. Retry to download it again. "
        + _by_hand(preset, url, path)
    )


def _hash_mismatch(algorithm, expected, received):
    return f"{algorithm} mismatch: expected {expected.lower()}, received {received}"


def _verify(preset, url, path, expected, record=None):
    """Checks a complete file (hash, then zip CRCs); returns its sha256, or removes it and raises.

    `record`: the sidecar's (sha256, size, mtime_ns) of a cached file; its
    bytes must still hash to that sha256 (then the zip was checked already).
    """
    algorithm = _hash_algorithm(expected) if expected else "sha256"
    digests = _digests(path, {"sha256", algorithm})
    if record is not None and digests["sha256"] != record[0]:
        _fail_corrupt(
            preset,
            url,
            path,
            "its bytes changed since it was verified (bit rot or a partial copy?): "
            + _hash_mismatch("sha256", record[0], digests["sha256"])
            + f" (recorded in {path + SIDECAR_SUFFIX})",
        )
    if expected and digests[algorithm] != expected.lower():
        _fail_corrupt(preset, url, path, _hash_mismatch(algorithm, expected, digests[algorithm]))
    if record is None:
        problem = _check_file(path, deep=True)
        if problem:
            _fail_corrupt(preset, url, path, problem)
    return digests["sha256"]


def _check_cached(preset, url, target, expected):
    """Verifies a cache hit: cheap (size + time against the sidecar) when the file is unchanged."""
    record = _read_sidecar(target)
    stat = os.stat(target)
    if record is not None and record[1:] == (stat.st_size, stat.st_mtime_ns):
        if not expected:
            return
        algorithm = _hash_algorithm(expected)
        if algorithm == "sha256":
            if record[0] != expected.lower():
                _fail_corrupt(preset, url, target, _hash_mismatch("sha256", expected, record[0]))
            return
        _verify(preset, url, target, expected, record)  # md5: the sidecar cannot answer
        return
    if record is None:  # copied by hand, or cached before sidecars: one full check
        problem = _check_file(target, deep=False)  # fast answer for an HTML page or a stub
        if problem:
            _fail_corrupt(preset, url, target, problem)
    _write_sidecar(target, _verify(preset, url, target, expected, record))


class _Dropped(OSError):
    """The transfer stopped early (or the server answered an unusable range)."""


# What a flaky link raises: worth another attempt that resumes.
_DROPPED = (
    _Dropped,
    http.client.HTTPException,  # IncompleteRead, RemoteDisconnected, BadStatusLine
    ConnectionError,  # reset, aborted, refused
    TimeoutError,  # socket.timeout: no data for READ_TIMEOUT s
    ssl.SSLError,
)


def _content_range(value):
    """(first byte, total) of `Content-Range: bytes a-b/total` or `bytes */total`; None if absent."""
    match = re.fullmatch(r"\s*bytes\s+(?:(\d+)-\d+|\*)/(\d+|\*)\s*", value or "")
    if match is None:
        return None, None
    first = int(match.group(1)) if match.group(1) is not None else None
    total = int(match.group(2)) if match.group(2) != "*" else None
    return first, total


def _fetch_once(url, part, timeout):
    """One request for `url` into `part`: resumes it (`Range`) when it exists, else starts it.

    Returns when the server says the file is complete (or gave no size);
    raises one of `_DROPPED` when the transfer stopped early (what arrived
    stays in `part`), `urllib.error.HTTPError` for an HTTP error.
    """
    import keras

    offset = os.path.getsize(part) if os.path.exists(part) else 0
    request = urllib.request.Request(url)
    if offset:
        request.add_header("Range", f"bytes={offset}-")
    try:
        response = urllib.request.urlopen(request, timeout=timeout)
    except urllib.error.HTTPError as error:
        if error.code != 416 or not offset:
            raise
        _, total = _content_range(error.headers.get("Content-Range"))
        error.close()
        if total is None or total == offset:
            return  # every byte is here already; the checks have the last word
        os.remove(part)  # longer than the file: it is not a prefix of this file
        raise _Dropped(f"{part} holds {offset} bytes, the file {total}; starting again") from None
    with response:
        status = getattr(response, "status", None) or 200  # a file:// answer has no status
        if status == 206:
            first, total = _content_range(response.headers.get("Content-Range"))
            if first != offset:
                os.remove(part)
                raise _Dropped(
                    f"asked for bytes from {offset}, the server sent a range starting at {first}; "
                    "starting again"
                )
            mode = "ab"
        else:  # 200: the whole file (the server ignores Range, or none was sent)
            offset, mode = 0, "wb"
            length = response.headers.get("Content-Length")
            total = int(length) if length and length.isdigit() else None
        progbar = keras.utils.Progbar(total)
        progbar.update(offset)
        with open(part, mode) as f:
            for block in iter(lambda: response.read(CHUNK_SIZE), b""):
                f.write(block)
                offset += len(block)
                progbar.update(offset)
    if total is not None and offset < total:
        raise _Dropped(f"the connection closed after {offset} of {total} bytes")
    if total is not None and offset > total:
        raise ValueError(f"received {offset} bytes, more than the {total} announced")


def _download(preset, url, part, target):
    """Fetches `url` into `part` in up to DOWNLOAD_ATTEMPTS requests, each resuming the last."""
    error = None
    for attempt in range(1, DOWNLOAD_ATTEMPTS + 1):
        if attempt > 1:
            time.sleep(RETRY_WAIT * (attempt - 1))
        try:
            _fetch_once(url, part, READ_TIMEOUT)
            return
        except urllib.error.HTTPError as http_error:
            error = http_error
            if http_error.code not in RETRY_STATUS:
                break
        except ValueError as too_long:
            _fail_corrupt(preset, url, part, str(too_long))
        except _DROPPED as dropped:
            error = dropped
        except urllib.error.URLError as url_error:  # wraps what the connection raised
            error = url_error
            if not isinstance(url_error.reason, _DROPPED):
                break
    raise ConnectionError(
        f"Downloading preset {preset.name!r} of {preset.variant!r} from {url} failed after "
        f"{attempt} attempt(s): {error}. {_kept(part) or 'Retry later. '}"
        + _by_hand(preset, url, target)
    ) from error


def _kept(part):
    """What the error says of a partial download: kept, and resumed by the next call."""
    kept = os.path.getsize(part) if os.path.exists(part) else 0
    if not kept:
        return ""
    return (
        f"The {kept} bytes received so far are kept in {part}; the next call resumes from "
        "there (delete that file to start again). "
    )


def get_weights_file(
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

    The file is fetched (with a progress bar) from `base_url` + the preset's
    path into `{cache}/keras_vit/{path}.part`, and renamed to
    `{cache}/keras_vit/{path}` once verified; later calls use the cached file
    without touching the network. A download that stops early is resumed
    (HTTP `Range`): up to 3 attempts within one call, then the `.part` file
    is kept and the next call continues it. A file copied into the cache by
    hand is used as is (after one full check).

    Verification: the sha256 or md5 (`file_hash`, else the preset's), then the
    zip archive with every member's CRC. The verified file's sha256, size and
    time are written to `{path}.sha256`; a cache hit whose size or time differ
    from that record is hashed again, and one whose bytes changed is removed.

    Args:
        name: str. Preset name (see `list_weights(variant)`).
        variant: str. Builder variant code, e.g. `"B/16"`.
        base_url: optional str. Where the bucket layout is served: an
            `https://`, `http://` or `file://` URL. Defaults to
            `$KERAS_VIT_WEIGHTS_URL`, else the official bucket.
        cache_dir: optional str. Cache root; defaults to `$KERAS_HOME`, else
            `~/.keras`.
        force_download: bool. Download again from the start even when cached
            (or partly downloaded). Defaults to False.
        timeout: float. Seconds to reach the host before failing (offline).
            Defaults to 3.
        file_hash: optional str. Expected sha256 (64 hex digits) or md5 (32)
            of the file; replaces the preset's. Defaults to None.

    Returns:
        str, the path of the verified `.npz` file.

    Raises:
        ValueError: unknown preset name (listing the valid ones), a malformed
            `file_hash`, or a corrupt file or one whose digest differs from the
            expected one (removed from the cache; the message names both
            digests and says how to retry).
        ConnectionError: the file is not cached and cannot be fetched; the
            message says whether the next call resumes, and where to put the
            file by hand.
    """
    preset = get_preset(variant, name)
    expected = file_hash or preset.file_hash
    if expected:
        _hash_algorithm(expected)
    url = preset.url(base_url)
    target = preset.cache_path(cache_dir)
    part = target + PART_SUFFIX
    if os.path.exists(target) and not force_download:
        _check_cached(preset, url, target, expected)
        return target

    parts = urllib.parse.urlsplit(url)
    if parts.scheme == "file":
        source = urllib.request.url2pathname(parts.path)
        if not os.path.exists(source):
            raise ConnectionError(
                f"Cannot fetch preset {name!r} of {variant!r}: {source} does not exist "
                f"(base URL {resolve_base_url(base_url)}). " + _by_hand(preset, url, target)
            )
    else:
        try:
            _probe(url, timeout)
        except OSError as error:
            raise ConnectionError(
                f"Cannot download preset {name!r} of {variant!r}: {parts.netloc} is not "
                f"reachable ({error}) and the file is not cached. {_kept(part)}"
                + _by_hand(preset, url, target)
            ) from error

    os.makedirs(os.path.dirname(target), exist_ok=True)
    if force_download and os.path.exists(part):
        os.remove(part)
    _download(preset, url, part, target)
    sha256 = _verify(preset, url, part, expected)
    os.replace(part, target)
    _write_sidecar(target, sha256)
    return target


def _file_head(path):
    """(head classes, pre_logits width) of a checkpoint, None where absent; reads only those."""
    from keras_vit.checkpoints import PREFIXES

    found = {}
    with np.load(path, allow_pickle=False) as data:
        for name in data.files:
            for leaf in ("head/kernel", "pre_logits/kernel"):
                if name == leaf or name in (p + leaf for p in PREFIXES):
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
    path = get_weights_file(weights, variant)
    if image_size is None:
        image_size = preset.image_size
    if num_classes is None:
        num_classes = preset.num_classes
    if include_top and representation_size is None and num_classes == preset.num_classes:
        file_classes, pre_logits = _file_head(path)
        if pre_logits is not None and file_classes == num_classes:
            representation_size = pre_logits
    return path, image_size, num_classes, representation_size
