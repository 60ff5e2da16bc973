"""`SameShape`: the shape and config boilerplate of a layer whose output has its input's shape."""

from keras_vit.layers._token_mixer import config_values


class SameShape:
    """Mixin for a `keras.layers.Layer` whose output shape is its input shape and whose
    `get_config` adds the attributes named in `CONFIG_KEYS`, in that order."""

    CONFIG_KEYS = ()

    def compute_output_shape(self, input_shape):
        return tuple(input_shape)

    def get_config(self):
        return {**super().get_config(), **config_values(self, self.CONFIG_KEYS)}
