"""Export, LoRA and int8 on the newer families (issue 30, item 4): one tiny model per family.

Each family is the architecture `from_timm` builds for one timm name (no checkpoint: random
weights), at width 32, one block, 28-32 px: rotary embeddings (EVA-02's with SwiGLU and its
sub-LN, DINOv3's with SwiGLU, RoPE-ViT's mixed, Perception Encoder's axial one with its
reference grid and MAP head: RoPE-ViT's axial is the same layer without those), BEiT's relative
position bias per block and shared, timm's RelPosMlp bias (shared; per block with residual
post-norm blocks), AIMv2's RMSNorm + patch norm + SwiGLU, and parallel blocks. (timm's packed
SwiGLU, DINOv2-giant's, is a checkpoint layout of the same `SwiGLU` layer: tests/weights.)

- SavedModel (`export_saved_model`): built with `dynamic_image_size` and served at two image
  sizes (the relative-position families, fixed-size by design: at their size); served logits
  equal to Keras within 1e-5.
- LiteRT (`export_litert`, float) of the fixed-size model (traced as the fixed-size SavedModel
  is): builtin operators only, logits within test_litert's ATOL.
- LoRA (`enable_lora`) on every attention projection and the block's MLP (the SwiGLU's
  `mlp_gate`, `mlp_up`, `mlp_down`): `merge_lora` gives the LoRA model's outputs; the merged
  model then quantized to int8 (`quantize`) stays close as test_quantization's checks.

The exports run where the other export tests trace in process, on the TensorFlow backend (on
JAX and PyTorch the same TensorFlow trace runs in a subprocess, covered by tests/export/test_saved_model.py
and test_litert.py); LoRA and int8 run on every backend.
"""

import keras
import numpy as np
import pytest

from keras_vit.export import export_litert, export_saved_model
from keras_vit.training.lora import enable_lora, get_lora_settings, merge_lora
from keras_vit.training.quantization import quantization_modes, quantize
from keras_vit.weights.timm.reader import from_timm
from tests.helpers import randomize_weights, to_numpy

ATOL = 1e-5  # served SavedModel logits against Keras (tests/export/test_saved_model.py)
TINY = dict(num_layers=1, hidden_dim=32, num_heads=2, mlp_dim=64, num_classes=3)
# id: (timm name, image size, another (height, width) for the dynamic-size model or None for
# a family with a fixed size, further builder arguments).
FAMILIES = {
    "rotary_eva02_swiglu_subln": ("eva02_tiny_patch14_224", 28, (42, 28), {}),
    "rotary_dinov3_swiglu": ("vit_small_plus_patch16_dinov3", 32, (48, 32), {}),
    "rotary_mixed": ("vit_small_patch16_rope_mixed_224", 32, (48, 32), {}),
    "rotary_pe_map": ("vit_pe_core_tiny_patch16_384", 32, (32, 48), {}),
    "beit_bias_per_block": ("beitv2_base_patch16_224", 32, None, {}),
    "beit_bias_shared": ("beitv2_base_patch16_224", 32, None, {"relative_position_bias": "shared"}),
    "relpos_mlp_shared": ("vit_srelpos_small_patch16_224", 32, None, {}),
    "relpos_mlp_post_norm": ("vit_relpos_base_patch16_rpn_224", 32, None, {}),
    "rmsnorm_patch_norm_swiglu": ("aimv2_large_patch14_224", 28, (28, 42), {}),
    "parallel": ("vit_small_patch16_18x2_224", 32, (48, 32), {}),
}
TF_ONLY = pytest.mark.skipif(
    keras.backend.backend() != "tensorflow",
    reason="the export traces with TensorFlow whatever the backend; in process on this one "
    "(the subprocess path of JAX and PyTorch: tests/export/test_saved_model.py, test_litert.py)",
)


def _images(size, batch, seed):
    height, width = (size, size) if isinstance(size, int) else size
    rng = np.random.default_rng(seed)
    return rng.uniform(-1, 1, (batch, height, width, 3)).astype("float32")


def _build(case, **kwargs):
    name, size, _, extra = FAMILIES[case]
    return from_timm(name, image_size=size, **TINY, **extra, **kwargs)


@pytest.fixture(scope="module", params=list(FAMILIES))
def family(request):
    """One family's model (perturbed random weights) and its logits on a few images."""
    case = request.param
    model = _build(case)
    randomize_weights(model, seed=sum(map(ord, case)))
    images = _images(FAMILIES[case][1], 16, seed=0)
    return dict(case=case, model=model, images=images, logits=to_numpy(model(images)))


def _serve(path, images):
    import tensorflow as tf

    signature = tf.saved_model.load(path).signatures["serving_default"]
    return {k: v.numpy() for k, v in signature(images=tf.constant(images)).items()}


@TF_ONLY
def test_saved_model_at_its_size_or_any_size(family, tmp_path):
    """A fixed-size family (relative position biases) exports at its size; the others are
    exported built with `dynamic_image_size` and served at their size and at another one (the
    fixed-size trace of every family is test_litert_float's: one SavedModel export each)."""
    case, model = family["case"], family["model"]
    size, other = FAMILIES[case][1:3]
    if other is None:  # relative position biases are made for one grid
        with pytest.raises(ValueError, match="relative_position_bias"):
            _build(case, dynamic_image_size=True)
        result = export_saved_model(model, tmp_path / "fixed", verbose=False)
        served = _serve(result.path, family["images"][:2])
        np.testing.assert_allclose(served["logits"], family["logits"][:2], rtol=0, atol=ATOL)
        return
    dynamic = _build(case, dynamic_image_size=True)
    dynamic.set_weights(model.get_weights())
    result = export_saved_model(dynamic, tmp_path / "dynamic", verbose=False)
    served = _serve(result.path, family["images"][:2])
    np.testing.assert_allclose(served["logits"], family["logits"][:2], rtol=0, atol=ATOL)
    x = _images(other, 2, seed=1)
    served = _serve(result.path, x)
    np.testing.assert_allclose(served["logits"], to_numpy(dynamic(x)), rtol=0, atol=ATOL)


@TF_ONLY
def test_litert_float(family, tmp_path):
    from tests.export.test_litert import ATOL as LITERT_ATOL
    from tests.export.test_litert import interpreter, op_names

    result = export_litert(family["model"], tmp_path / "model.tflite", verbose=False)
    names = op_names(result.path)
    assert not [n for n in names if n.startswith("Flex") or n == "CUSTOM"], names
    runner = interpreter(result.path).get_signature_runner("serving_default")
    logits = runner(images=family["images"][:3])["logits"]
    np.testing.assert_allclose(logits, family["logits"][:3], rtol=0, atol=LITERT_ATOL)


def _lora_targets(model):
    mlp = ("mlp_gate", "mlp_up", "mlp_down") if model.config.mlp == "swiglu" else (
        "mlp_dense_1", "mlp_dense_2")  # fmt: skip
    return ("query", "key", "value", "attention_output", *mlp)


def test_lora_merges_exactly_then_int8_stays_close(family):
    """LoRA on the attention and MLP projections, merged; the merged model quantized."""
    model, images = _build(family["case"]), family["images"]
    model.set_weights(family["model"].get_weights())
    targets = _lora_targets(model)
    enable_lora(model, 2, targets=targets)
    assert get_lora_settings(model)["targets"] == targets
    adapters = [w for w in model.weights if w.name == "lora_kernel_a"]
    assert len(adapters) == len(targets) * model.blocks[0].num_parallel  # every branch
    rng = np.random.default_rng(5)
    for w in model.weights:  # nonzero adapters, as after training
        if w.name in ("lora_kernel_a", "lora_kernel_b"):
            w.assign(rng.normal(0, 0.2, tuple(w.shape)).astype("float32"))
    adapted = to_numpy(model(images))
    assert np.abs(adapted - family["logits"]).max() > 1e-3  # the adapters act
    merge_lora(model)
    assert get_lora_settings(model) is None
    np.testing.assert_allclose(to_numpy(model(images)), adapted, rtol=0, atol=ATOL)
    # int8 (test_quantization's checks): every projection quantized, within a few % of the
    # logits' range, the same class for at least 14 of 16 images.
    quantize(model, "int8")
    modes = quantization_modes(model)
    block = model.blocks[0].path
    for target in targets:
        layer = {"mlp_gate": "gate", "mlp_up": "up", "mlp_down": "down"}.get(target, target)
        assert any(p.startswith(block) and layer in p.split("/")[-1] for p in modes), target
    assert set(modes.values()) == {"int8"}
    out = to_numpy(model(images))
    assert np.abs(out - adapted).max() < 0.05 * np.abs(adapted).max()
    assert (out.argmax(-1) == adapted.argmax(-1)).mean() >= 14 / 16
