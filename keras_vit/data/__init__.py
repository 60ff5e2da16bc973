"""Input pipelines (`tf.data`, TensorFlow-only; imported lazily): `digits`, `folder:`, `tfds:`,
`synthetic`.

Dataset specs:
    - `digits`: scikit-learn's 8x8 handwritten digits (offline, the default). 30% is held out as
      the `test` split (stratified, fixed seed); images are upsampled to the model's size and the
      gray channel is replicated to 3 channels (unless `num_channels=1`).
    - `folder:PATH`: one sub-folder per class (`PATH/cat/*.jpg`, ...). If `PATH/train` and
      `PATH/test` (or `validation`/`val`) hold class folders, they are the splits; otherwise 30%
      is held out as `test` (stratified, fixed seed). Every image is decoded once up front: a
      corrupt file raises an error naming it, or (`on_corrupt="skip"`) is dropped with a warning.
    - `imagefolder:PATH`: a `tfds.folder_dataset.ImageFolder` (`PATH/SPLIT/LABEL/*.png`), with
      the same checks (corrupt images included) as `folder:`.
    - `tfds:NAME[:SPLIT]`: a TensorFlow Datasets dataset prepared in `data_dir` (SPLIT is the
      training split, `train` by default). Nothing is downloaded unless `download=True`; a
      dataset that is not prepared fails at once with instructions (an offline `tfds.load` would
      hang for minutes before failing). With `download=True`, the hosts in the dataset's URL list
      are probed first (a TCP connection each, in parallel, `PROBE_TIMEOUT` seconds in all): with
      no network the same instructions come within seconds, not after minutes of retries.
    - `synthetic[:CLASSES[:IMAGES[:SIZE]]]`: random images made in memory, for speed measurements
      and offline runs on any machine (defaults: 10 classes, 1,024 training images, 224 px;
      e.g. `synthetic:1000:8192:224`). The `test` split holds a quarter as many images. Each
      image is a fixed function of (split, index): its class's pattern (a random 4x4 colour grid,
      enlarged to SIZE) plus uniform noise (one of 16 fixed noise fields, shifted by an
      index-dependent offset), so a model can learn the classes. Images are made inside the
      `tf.data` graph from stateless random draws (parallel, no Python per element, only the
      16 noise fields held in memory), so the same spec gives the same images in every run.

Mistakes end in one clear error naming the received value and what to do: `ValueError` for a
malformed spec, an unknown scheme, tfds name or split, a path that is a file, fewer than two
classes, or a split whose images are all corrupt (even with `on_corrupt="skip"`);
`FileNotFoundError` for a missing folder or a tfds dataset that is not prepared and cannot be
downloaded. A class folder without images is kept, with a `UserWarning` naming it: labels index
the sorted class folders, so the other classes keep their labels (and a model trained on the
folder keeps its class order once images are added); a training split still needs images of at
least two classes.

Preprocessing as in the paper: training images get an Inception-style random resized crop and a
horizontal flip (off for digits); evaluation images are resized. Values are scaled to [-1, 1].
Labels are one-hot (so MixUp/CutMix and label smoothing share one loss). Every random choice is
stateless, keyed by (seed, epoch, example), so a resumed run sees exactly the batches the
uninterrupted run would have seen. The `tf.data` datasets feed `model.fit` on every Keras backend.

Validation apart from test: `load_splits` gives a run's training, validation and test splits. A
dataset's own `validation` split (tfds, `imagefolder:`) is used when it is not the test split;
otherwise `validation_fraction` (default 0.1) of the training split is carved out (`Carve`): a
fixed seed, stratified by class (digits, folders, synthetic, `imagefolder:`), or the last
examples in tfds' order (tfds catalog datasets, whose labels are not read in advance).

Modules: `specs` (spec parsing), `source` (`Source`), `load` (`load_source`), `carve` and
`splits` (the validation split), the sources
`digits`, `synthetic`, `folder` and `tfds_source` (`tfds:` and `imagefolder:`), `probe` (the
offline check before a download), `corrupt` (corrupt-image scanning), `crop` (the training crop)
and `pipelines` (training and evaluation pipelines); `naflex` (NumPy only: images of any sizes
as a NaFlex batch, `naflex_batch`, as timm's NaFlex pipeline; to and from transformers' SigLIP 2
inputs, `naflex_to_siglip2` / `naflex_from_siglip2`) and `naflex_tf` (the same batches in `tf.data`:
`naflex_dataset`, `naflex_example`).
"""

from keras_vit.data.carve import Carve, carve_indices
from keras_vit.data.corrupt import find_corrupt_images
from keras_vit.data.crop import random_resized_crop, sample_crop_box
from keras_vit.data.load import default_eval_split, load_source
from keras_vit.data.naflex import (
    naflex_batch,
    naflex_from_siglip2,
    naflex_image_size,
    naflex_to_siglip2,
)
from keras_vit.data.naflex_tf import naflex_dataset, naflex_example
from keras_vit.data.pipelines import (
    epochs_for_steps,
    eval_pipeline,
    numpy_arrays,
    steps_per_epoch_for,
    train_pipeline,
)
from keras_vit.data.probe import PROBE_TIMEOUT, download_hosts, unreachable_hosts
from keras_vit.data.source import Source
from keras_vit.data.specs import EXPECTED_SPECS, SCHEMES, parse_spec, parse_synthetic
from keras_vit.data.splits import Splits, load_splits
from keras_vit.data.tfds_source import tfds_builder_source

__all__ = [
    "EXPECTED_SPECS",
    "PROBE_TIMEOUT",
    "SCHEMES",
    "Carve",
    "Source",
    "Splits",
    "carve_indices",
    "default_eval_split",
    "download_hosts",
    "epochs_for_steps",
    "eval_pipeline",
    "find_corrupt_images",
    "load_source",
    "load_splits",
    "naflex_batch",
    "naflex_dataset",
    "naflex_example",
    "naflex_from_siglip2",
    "naflex_image_size",
    "naflex_to_siglip2",
    "numpy_arrays",
    "parse_spec",
    "parse_synthetic",
    "random_resized_crop",
    "sample_crop_box",
    "steps_per_epoch_for",
    "tfds_builder_source",
    "train_pipeline",
    "unreachable_hosts",
]
