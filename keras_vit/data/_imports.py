"""TensorFlow and TensorFlow Datasets, imported lazily and once (a call inside a traced
`tf.data` function then imports nothing), with an error that says what to install."""

import importlib

_MODULES = {}  # imported once: a call inside a traced tf.data function then imports nothing


def _import(module, message):
    if module not in _MODULES:
        try:
            _MODULES[module] = importlib.import_module(module)
        except ImportError as e:  # pragma: no cover - depends on the install
            raise ImportError(message) from e
    return _MODULES[module]


def import_tf():
    return _import(
        "tensorflow",
        "keras_vit.data builds tf.data pipelines and needs TensorFlow "
        "(pip install 'keras-vit[recipes]'). It feeds every Keras backend.",
    )


def import_tfds():
    return _import(
        "tensorflow_datasets",
        "'imagefolder:' and 'tfds:' datasets need TensorFlow Datasets "
        "(pip install tensorflow-datasets).",
    )

