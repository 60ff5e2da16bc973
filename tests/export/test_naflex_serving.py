"""NaFlex SavedModels: encoded images of any size, patchified in the graph
(`keras_vit.data.naflex_tf.naflex_example`), give the model's outputs on `naflex_batch`."""

import io

import keras
import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

from keras_vit.data import naflex_batch  # noqa: E402
from keras_vit.export import export_saved_model  # noqa: E402
from keras_vit.models.vit import ViT  # noqa: E402
from tests.helpers import randomize_weights, to_numpy  # noqa: E402

SIZES = ((12, 20), (20, 12), (9, 30), (7, 7), (33, 65), (100, 3))


def _png(pixels):
    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="PNG")
    return buffer.getvalue()


@pytest.mark.skipif(
    keras.backend.backend() != "tensorflow",
    reason="SavedModel export is TensorFlow (other backends export through a TF subprocess, "
    "tested in tests/export/test_saved_model.py)",
)
def test_naflex_saved_model_serves_encoded_images_of_any_size(tmp_path):
    model = ViT("mu/4", image_size=16, num_classes=3, naflex=True, pooling="gap",
                class_token=False)  # fmt: skip
    randomize_weights(model, scale=0.1)
    result = export_saved_model(model, str(tmp_path / "naflex"), max_patches=16, verbose=False)
    assert result.signatures == ("serving_default", "serve_bytes")
    rng = np.random.default_rng(0)
    images = [rng.integers(0, 256, (*size, 3), dtype="uint8") for size in SIZES[:4]]
    batch = naflex_batch([image / 127.5 - 1.0 for image in images], 4, 16)
    expected = to_numpy(model(batch))
    loaded = tf.saved_model.load(result.path)
    served = loaded.signatures["serve_bytes"](
        image_bytes=tf.constant([_png(image) for image in images])
    )
    np.testing.assert_allclose(served["logits"].numpy(), expected, rtol=1e-5, atol=1e-5)
    direct = loaded.signatures["serving_default"](
        patches=tf.constant(batch["patches"]),
        patch_coord=tf.constant(batch["patch_coord"].astype("int32")),
        patch_valid=tf.constant(batch["patch_valid"]),
    )
    np.testing.assert_allclose(direct["logits"].numpy(), expected, rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="max_patches must be a positive int"):
        export_saved_model(model, str(tmp_path / "bad"), max_patches=0, verbose=False)
    with pytest.raises(ValueError, match="for a model without naflex=True"):
        export_saved_model(ViT("mu/4", image_size=16, num_classes=3), str(tmp_path / "plain"),
                           max_patches=16, verbose=False)  # fmt: skip
