import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

from keras_vit._import_order import load_triton_before_tensorflow  # noqa: E402

load_triton_before_tensorflow()  # else timm segfaults on the TensorFlow backend

import keras  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402


@pytest.fixture(autouse=True)
def _seed():
    keras.utils.set_random_seed(1234)
    np.random.seed(1234)
    yield
    keras.config.set_dtype_policy("float32")


def backend():
    return keras.backend.backend()
