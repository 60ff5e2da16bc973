"""`FlexiViT`: one ViT trained at a random patch size per batch (Beyer et al., CVPR 2023).

The model keeps one set of weights: the patch-embedding kernel at a base patch size and the
position embedding at the base grid. Every training step draws a patch size from a list; the
kernel is PI-resized to it and the position embedding resampled to the image's grid at that
size, inside the step (`PatchEncoder(..., patch_size=...)`), so gradients reach the base
weights. The choice runs in the graph (`keras.random.randint` + `keras.ops.switch` over one
branch per patch size), so it is a plain `model.fit` on JAX, TensorFlow and PyTorch; each branch
returns the same `(B, ...)` output, only the token count inside differs.

Deploy at any patch size with `keras_vit.with_patch_size(flexi_model, patch_size)`, which builds a
plain ViT with the same resizes (bilinear PI-resize, antialiased bicubic position embedding).
"""

import dataclasses
import functools

import keras
from keras import ops

from keras_vit.layers import PatchEncoder
from keras_vit.layers._checks import check_positive_int_pair, check_seed
from keras_vit.models.config import ViTConfig
from keras_vit.models.encoder import build_model


def _check_patch_sizes(patch_sizes):
    if isinstance(patch_sizes, (str, bytes)):
        raise ValueError(
            "patch_sizes must be a non-empty sequence of ints or (height, width) pairs, not a "
            f"string. Received: patch_sizes={patch_sizes!r} (write e.g. patch_sizes=(4, 8))"
        )
    try:
        sizes = tuple(patch_sizes)
    except TypeError:
        sizes = ()
    if not sizes:
        raise ValueError(
            "patch_sizes must be a non-empty sequence of ints or (height, width) pairs. "
            f"Received: patch_sizes={patch_sizes!r}"
        )
    return tuple(check_positive_int_pair(size, "patch_sizes") for size in sizes)


def check_not_naflex(model, what):
    """A ValueError when `model` is a NaFlex model (`naflex=True`), which `what` does not take."""
    config = getattr(model, "config", None)
    if getattr(config, "naflex", False):
        raise ValueError(
            f"{what} takes a ViT of images (B, H, W, C); a NaFlex model (naflex=True) takes "
            "patch sequences of any grid and has no single patch grid to resize. Received: "
            f"model {model.name!r} with naflex=True"
        )


def _dynamic_copy(model):
    """`model` itself if it takes any image size, else the same ViT rebuilt dynamic (weights
    copied), so that its blocks take any token count."""
    config = ViTConfig.from_model(model)
    if config.dynamic_image_size:
        return model
    if config.patch_dropout_rate:  # refused in FlexiViT's words, not the rebuilt config's
        raise ValueError(
            "FlexiViT changes the patch grid at every batch (it runs its backbone with "
            "dynamic_image_size=True), and patch dropout needs a static token count. Build the "
            "backbone with patch_dropout_rate=0. Received: backbone with patch_dropout_rate="
            f"{config.patch_dropout_rate}"
        )
    copy = build_model(dataclasses.replace(config, dynamic_image_size=True))
    for old, new in zip(model.layers, copy.layers, strict=True):
        new.set_weights(old.get_weights())
    return copy


@keras.saving.register_keras_serializable(package="keras_vit")
class FlexiViT(keras.Model):
    """A ViT trained with a random patch size per batch, one set of weights (FlexiViT).

    Wraps a ViT built by `keras_vit.ViT` (its patch size is the base kernel size, its image
    size the base position-embedding grid; FlexiViT uses a 32 px kernel and a 7x7 grid). In
    training each batch picks one of `patch_sizes` uniformly at random (in the graph, from the
    model's seed); outside training the model runs at `patch_size`. The images keep their size:
    a smaller patch makes more tokens.

    Args:
        backbone: a `keras.Model` built by `keras_vit.ViT` (plain or hybrid). A model made
            for one image size is rebuilt with `dynamic_image_size=True` (same weights), so
            that its blocks take any token count.
        patch_sizes: sequence of ints or (height, width) pairs. The patch sizes to train with;
            each must divide the training images.
        patch_size: optional int or (height, width). The patch size outside training. Defaults
            to the backbone's.
        seed: optional int. Seed of the patch-size draws. Defaults to None.

    Call arguments:
        images: `(B, H, W, C)`, H and W divisible by every patch size used.
        training: bool. Draw a patch size per call (True) or use `patch_size`.

    Returns:
        What the backbone returns (logits, a pooled vector or tokens; with `pooling=None` the
        token count depends on the patch size, so a training step needs a pooled output).

    Example:

    >>> import numpy as np
    >>> import keras_vit
    >>> backbone = keras_vit.ViT("mu/8", image_size=32, num_classes=10)
    >>> flexi = FlexiViT(backbone, patch_sizes=(4, 8, 16), seed=0)
    >>> tuple(flexi(np.zeros((2, 32, 32, 3), "float32"), training=True).shape)
    (2, 10)
    >>> keras_vit.with_patch_size(flexi, 16).output_shape
    (None, 10)

    Reference:
        Beyer et al., 2023, "FlexiViT: One Model for All Patch Sizes", Sec. 3.
    """

    def __init__(self, backbone, patch_sizes, patch_size=None, seed=None, **kwargs):
        if isinstance(backbone, dict):  # from_config
            backbone = keras.saving.deserialize_keras_object(backbone)
        if not isinstance(backbone, keras.Model):
            raise ValueError(
                "backbone must be a keras.Model built by keras_vit.ViT. "
                f"Received: backbone={backbone!r}"
            )
        check_not_naflex(backbone, "FlexiViT")
        patch_sizes = _check_patch_sizes(patch_sizes)
        backbone = _dynamic_copy(backbone)
        kwargs.setdefault("name", f"flexi_{backbone.name}")
        # No autocast at this level: the branches read the variables' own (float32) values and
        # every sublayer casts for itself, as in the backbone.
        super().__init__(autocast=False, **kwargs)
        self.backbone = backbone
        self.patch_sizes = _check_patch_sizes(patch_sizes)
        encoders = [layer for layer in backbone.layers if isinstance(layer, PatchEncoder)]
        self.patch_encoder = encoders[0]
        own = self.patch_encoder.patch_size
        self.patch_size = own if patch_size is None else check_positive_int_pair(
            patch_size, "patch_size"
        )
        self.seed = check_seed(seed)
        self.seed_generator = keras.random.SeedGenerator(seed)
        features = self.patch_encoder.input
        self.stem = None
        if features is not backbone.input:
            self.stem = keras.Model(backbone.input, features, name="stem")
        self.trunk = keras.Model(self.patch_encoder.output, backbone.output, name="trunk")
        self.built = True  # the backbone is built

    def build(self, input_shape):
        self.built = True  # the backbone is built

    @property
    def preprocessing(self):
        """The backbone's input spec (`backbone.preprocessing`): one spec at every patch size."""
        return self.backbone.preprocessing

    def set_preprocessing(self, preprocessing=None, **changes):
        """Replaces the backbone's input spec (see `VisionTransformer.set_preprocessing`);
        returns this model."""
        self.backbone.set_preprocessing(preprocessing, **changes)
        return self

    @property
    def preprocessor(self):
        """The backbone's `ImagePreprocessor`: uint8 images of any size -> this model's inputs."""
        return self.backbone.preprocessor

    def _forward(self, patch_size, images, training=None):
        x = images if self.stem is None else self.stem(images, training=training)
        x = self.patch_encoder(x, patch_size=patch_size, training=training)
        return self.trunk(x, training=training)

    def _stateless_branch(self, patch_size, values, images, training):
        """`_forward` at `patch_size` as a pure function of the variables' `values`.

        A branch of `ops.switch` must not assign variables (under JAX a value assigned inside
        `lax.switch` escapes its trace): dropout and drop path advance their seed generators.
        The branch runs in its own `StatelessScope` and returns the new non-trainable values
        with its output; `call` assigns them after the switch.
        """
        variables = self.backbone.variables
        with keras.StatelessScope(state_mapping=list(zip(variables, values, strict=True))) as scope:
            out = self._forward(patch_size, images, training=training)
        states = self.backbone.non_trainable_variables
        return out, [scope.get_current_value(v) for v in states]

    def draw_patch_size_index(self):
        """The index into `patch_sizes` of the next training step (uniform, from `seed`)."""
        return keras.random.randint((), 0, len(self.patch_sizes), seed=self.seed_generator)

    def call(self, images, training=None):
        if not training or len(self.patch_sizes) == 1:
            size = self.patch_sizes[0] if training else self.patch_size
            return self._forward(size, images, training=training)
        index = self.draw_patch_size_index()
        values = [v.value for v in self.backbone.variables]
        branches = [
            functools.partial(self._stateless_branch, size, values, training=training)
            for size in self.patch_sizes
        ]
        out, states = ops.switch(index, branches, images)
        for variable, value in zip(self.backbone.non_trainable_variables, states, strict=True):
            variable.assign(value)
        return out

    def compute_output_spec(self, images, training=None):
        return self._forward(self.patch_size, images, training=False)

    def get_config(self):
        return {
            "backbone": keras.saving.serialize_keras_object(self.backbone),
            "patch_sizes": self.patch_sizes,
            "patch_size": self.patch_size,
            "seed": self.seed,
            "name": self.name,
        }

    @classmethod
    def from_config(cls, config):
        return cls(**config)
