"""`BlockRemat`: `TransformerBlock`'s rematerialisation (`remat=True`), as a mixin.

The block under `keras.remat` (`jax.checkpoint`, `tf.recompute_grad`,
`torch.utils.checkpoint`), drawing the same dropout and drop-path masks in the recomputation as
in the forward pass (JAX and PyTorch), or off with a warning where it would not (TensorFlow with
dropout). The block provides `_forward(tokens, training, return_attention_scores, rotary)` and
its rates; see `keras_vit.layers.TransformerBlock`'s `remat` argument.
"""

import warnings

import keras
from keras import ops


class BlockRemat:
    """The `remat=True` call of a `TransformerBlock` (a mixin: no state of its own)."""

    def _remat_call(self, inputs, training, rotary=(None, None, None)):
        """The block under `keras.remat`, drawing the same dropout masks in the recomputation."""
        seed_states = self.non_trainable_variables if training else []
        if not seed_states:
            return keras.remat(
                lambda tokens: self._forward(tokens, training, False, rotary)
            )(inputs)
        if keras.backend.backend() == "jax":
            return self._remat_call_jax(inputs, training, seed_states, rotary)
        # PyTorch: torch.utils.checkpoint replays PyTorch's global generator (unseeded dropout)
        # but not Keras seed generators (drop path, seeded dropout), whose state variables the
        # first pass advanced: the recomputation starts again from the states the forward pass
        # saw, so that it draws the same masks.
        saved = [(variable, ops.copy(variable.value)) for variable in seed_states]

        def forward(tokens):
            for variable, state in saved:
                variable.assign(state)
            return self._forward(tokens, training, False, rotary)

        return keras.remat(forward)(inputs)

    def _remat_call_jax(self, inputs, training, seed_states, rotary=(None, None, None)):
        """jax.checkpoint needs a pure function: variables in, new seed states out."""
        variables = self.variables

        def pure(tokens, values):
            mapping = list(zip(variables, values, strict=True))
            with keras.StatelessScope(state_mapping=mapping) as scope:
                out = self._forward(tokens, training, False, rotary)
            return out, [scope.get_current_value(variable) for variable in seed_states]

        out, states = keras.remat(pure)(inputs, [variable.value for variable in variables])
        for variable, state in zip(seed_states, states, strict=True):
            variable.assign(state)
        return out

    def _remat_redraws_dropout(self, training):
        """tf.recompute_grad draws new dropout masks in the recomputation (wrong gradients)."""
        rates = (self.dropout_rate, self.drop_path_rate, self.attention_dropout_rate)
        active = training and any(rates)
        if not active or keras.backend.backend() != "tensorflow":
            return False
        if not getattr(self, "_warned_remat", False):
            warnings.warn(
                f"{self.name}: remat is off while training with dropout or drop path on the "
                "TensorFlow backend (tf.recompute_grad would draw new dropout masks when it "
                "recomputes the block, giving wrong gradients). JAX and PyTorch rematerialise "
                "with dropout.",
                stacklevel=3,
            )
            self._warned_remat = True
        return True
