"""Shared test helpers: a layer's config and `.keras` round-trip checks, a NumPy reference ViT.

The full per-layer check (config, serialization, weights, shapes, a training step, mixed
precision) is `tests.layer_harness.run_layer_test`, which every layer test calls.
"""

import inspect
import math

import keras
import numpy as np


def to_numpy(x):
    return keras.ops.convert_to_numpy(x)


def check_config_complete(layer):
    """get_config() holds exactly the __init__ arguments (plus the base Layer ones)."""
    config = layer.get_config()
    params = [
        p
        for p in inspect.signature(type(layer).__init__).parameters
        if p not in ("self", "kwargs")
    ]
    missing = [p for p in params if p not in config]
    assert not missing, f"{type(layer).__name__}.get_config() misses {missing}"
    base = set(keras.layers.Layer().get_config())
    extra = set(config) - set(params) - base
    assert not extra, f"{type(layer).__name__}.get_config() has derived keys {extra}"
    clone = type(layer).from_config(config)
    assert clone.get_config() == config


def roundtrip_model(model, inputs, tmp_path):
    """Saves `model` as .keras, loads it, checks identical outputs; returns the loaded model."""
    path = str(tmp_path / "model.keras")
    model.save(path)
    loaded = keras.saving.load_model(path)
    np.testing.assert_array_equal(to_numpy(model(inputs)), to_numpy(loaded(inputs)))
    return loaded


def roundtrip_layer(layer, inputs, tmp_path, **call_kwargs):
    """Saves a one-layer functional model as .keras and checks identical outputs after loading."""
    x = keras.Input(inputs.shape[1:])
    roundtrip_model(keras.Model(x, layer(x, **call_kwargs)), inputs, tmp_path)


# --- plain NumPy reference of the paper's equations -------------------------------------------


def np_layer_norm(x, scale, bias, eps=1e-6):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * scale + bias


def np_gelu(x, approximate=True):
    if approximate:
        return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)))
    from scipy.special import erf

    return 0.5 * x * (1 + erf(x / np.sqrt(2)))


def np_softmax(x, axis=-1):
    x = x - x.max(axis, keepdims=True)
    e = np.exp(x)
    return e / e.sum(axis, keepdims=True)


def np_msa(x, p):
    """Multi-head self-attention with official-layout weights (D,H,Dh) / (H,Dh,D)."""
    q = np.einsum("btd,dhk->bthk", x, p["query/kernel"]) + p["query/bias"]
    k = np.einsum("btd,dhk->bthk", x, p["key/kernel"]) + p["key/bias"]
    v = np.einsum("btd,dhk->bthk", x, p["value/kernel"]) + p["value/bias"]
    logits = np.einsum("bqhk,bshk->bhqs", q, k) / math.sqrt(q.shape[-1])
    weights = np_softmax(logits)
    out = np.einsum("bhqs,bshk->bqhk", weights, v)
    return np.einsum("bqhk,hkd->bqd", out, p["out/kernel"]) + p["out/bias"], weights


def np_block(x, p, eps=1e-6, approximate_gelu=True):
    """Eq. 2-3: z' = MSA(LN(z)) + z; z = MLP(LN(z')) + z'."""
    y, weights = np_msa(np_layer_norm(x, p["ln0/scale"], p["ln0/bias"], eps), p)
    x = x + y
    y = np_layer_norm(x, p["ln2/scale"], p["ln2/bias"], eps)
    y = np_gelu(y @ p["mlp0/kernel"] + p["mlp0/bias"], approximate_gelu) @ p["mlp1/kernel"]
    return x + y + p["mlp1/bias"], weights


def block_params(block):
    """Reads a TransformerBlock's weights into the NumPy reference's names."""
    att = block.attention
    n = to_numpy
    return {
        "ln0/scale": n(block.attention_norm.gamma),
        "ln0/bias": n(block.attention_norm.beta),
        "query/kernel": n(att.query_dense.kernel),
        "query/bias": n(att.query_dense.bias),
        "key/kernel": n(att.key_dense.kernel),
        "key/bias": n(att.key_dense.bias),
        "value/kernel": n(att.value_dense.kernel),
        "value/bias": n(att.value_dense.bias),
        "out/kernel": n(att.output_dense.kernel),
        "out/bias": n(att.output_dense.bias),
        "ln2/scale": n(block.mlp_norm.gamma),
        "ln2/bias": n(block.mlp_norm.beta),
        "mlp0/kernel": n(block.mlp_dense_1.kernel),
        "mlp0/bias": n(block.mlp_dense_1.bias),
        "mlp1/kernel": n(block.mlp_dense_2.kernel),
        "mlp1/bias": n(block.mlp_dense_2.bias),
    }


def np_standardize(kernel, epsilon=1e-5):
    """StdConv2D's kernel: per output channel over (kh, kw, C_in), population std + epsilon."""
    kernel = kernel - kernel.mean(axis=(0, 1, 2), keepdims=True)
    return kernel / (kernel.std(axis=(0, 1, 2), keepdims=True) + epsilon)


def same_pads(size, k, s):
    """TF / lax 'SAME' padding of one axis: (before, after, output size)."""
    out = -(-size // s)
    total = max((out - 1) * s + k - size, 0)
    return total // 2, total - total // 2, out


def np_conv_same(x, w, stride):
    """TF / lax 'SAME' convolution, NHWC input, HWIO kernel, loops over kernel taps."""
    kh, kw, _, cout = w.shape
    b, h, wd, _ = x.shape
    top, bottom, oh = same_pads(h, kh, stride)
    left, right, ow = same_pads(wd, kw, stride)
    xp = np.pad(x, ((0, 0), (top, bottom), (left, right), (0, 0)))
    out = np.zeros((b, oh, ow, cout), np.float64)
    for i in range(kh):
        for j in range(kw):
            patch = xp[:, i : i + stride * oh : stride, j : j + stride * ow : stride, :]
            out += patch @ w[i, j]
    return out


def np_patches(images, patch):
    b, h, w, c = images.shape
    ph, pw = (patch, patch) if isinstance(patch, int) else patch
    out = np.zeros((b, (h // ph) * (w // pw), ph * pw * c), images.dtype)
    n = 0
    for i in range(h // ph):
        for j in range(w // pw):
            out[:, n] = images[:, i * ph : (i + 1) * ph, j * pw : (j + 1) * pw, :].reshape(b, -1)
            n += 1
    return out


def randomize_weights(model, seed=0, scale=0.2):
    """Gives every weight random values (the zero-initialised head included)."""
    rng = np.random.default_rng(seed)
    for w in model.weights:
        value = rng.normal(0.0, scale, size=tuple(w.shape)).astype("float32")
        if w.path.endswith(("gamma", "scale")):
            value += 1.0
        w.assign(value)
