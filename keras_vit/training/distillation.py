"""DeiT's knowledge distillation through the distillation token, from any Keras teacher.

`Distiller(student, teacher, mode)` trains a student built with `distillation_token=True`: its
class-token head learns the labels, its distillation-token head (`head_dist`) learns the
teacher's predictions, computed in the same step on the same (augmented) images, and the loss is
DeiT's split (`alpha` 0.5):

- `"hard"`: `(1 - alpha) CE(head(cls), y) + alpha CE(head_dist(dist), argmax teacher)`;
- `"soft"`: `(1 - alpha) CE(head(cls), y) + alpha tau**2 KL(softmax(teacher / tau) ||
  softmax(head_dist(dist) / tau))`, the KL summed and divided by the number of logits
  (batch x classes), exactly as DeiT's `DistillationLoss`.

The design is Keras' `compute_loss` / `compute_metrics` extension points on a small wrapping
model, no `train_step`: `Distiller.call` returns both heads' logits stacked `(B, 2, K)`, the
metrics see their average (the student's own inference output), and the evaluation loss is the
compiled loss on that average. The teacher is frozen and runs in inference mode. `student` is
the model to save (`Distiller.saved_model`).

Reference:
    Touvron et al., 2021, "Training data-efficient image transformers & distillation through
    attention" (DeiT), Sec. 4; github.com/facebookresearch/deit `losses.py`.
"""

import os

import keras
from keras import ops

from keras_vit.models.heads import HEAD, HEAD_DIST
from keras_vit.training.settings import DISTILLATION_MODES as MODES  # its one home


def _heads(student):
    """The student's class-token and distillation-token classifiers (its `heads` role)."""
    heads = getattr(student, "heads", None)
    if heads is None:  # functional models built before the model class
        heads = []
        for name in (HEAD, HEAD_DIST):
            try:
                heads.append(student.get_layer(name))
            except ValueError:
                pass
    if len(heads) != 2:
        raise ValueError(
            "Distillation needs a student built with distillation_token=True and a classifier "
            f"(heads head and head_dist). Received: model {student.name!r} with "
            f"{len(heads)} head(s)"
        )
    return heads


def load_teacher(teacher):
    """A teacher from a `keras.Model` or a `.keras` path (loaded with `compile=False`, safe)."""
    if isinstance(teacher, keras.Model):
        return teacher
    if isinstance(teacher, (str, os.PathLike)):
        path = os.fspath(teacher)
        if not path.endswith(".keras"):
            raise ValueError(f"teacher (--teacher) must be a .keras file. Received: {path!r}")
        if not os.path.exists(path):
            raise FileNotFoundError(f"Teacher model not found (--teacher): {path!r}")
        from keras_vit import saving

        return saving.load_model(path)  # compile=False, safe_mode on
    raise ValueError(
        f"teacher must be a keras.Model or a .keras path. Received: {type(teacher).__name__}"
    )


def _teacher_error(teacher, what):
    name = teacher if isinstance(teacher, (str, os.PathLike)) else getattr(teacher, "name", "")
    return ValueError(f"teacher (--teacher) {os.fspath(name)!r} {what}")


def check_teacher(teacher, image_size=None, num_channels=None, num_classes=None):
    """The teacher (loaded), after checking it can teach a student of these inputs / classes.

    A teacher takes the student's images: one image input of `(image_size, num_channels)`
    (a NaFlex model takes patch batches, a model without a known input shape, such as a
    `Sequential` built without an `Input`, cannot be checked), and returns `(batch, classes)`
    logits over `num_classes` classes. Every refusal names the teacher (`--teacher`), what it
    takes or returns, and what the student needs, before a run writes anything.

    Args:
        teacher: a `keras.Model` or a `.keras` path.
        image_size: optional int or (height, width). The student's input size.
        num_channels: optional int. The student's input channels.
        num_classes: optional int. The student's classes.

    Returns:
        The teacher `keras.Model`.
    """
    model = load_teacher(teacher)
    config = getattr(model, "config", None)
    try:
        inputs = model.input
    except (AttributeError, ValueError):  # a model never built: refused below
        inputs = None
    if getattr(config, "naflex", False) or isinstance(inputs, dict):
        raise _teacher_error(
            teacher, "is a NaFlex model (it takes patch batches); distillation feeds the "
            "teacher the student's images: give an image model (a plain ViT or a CNN)."
        )
    try:
        shape = model.input_shape
        out = model.output_shape
    except (AttributeError, ValueError):
        raise _teacher_error(
            teacher, f"({type(model).__name__}) has no known input shape (a model never built, "
            "e.g. a Sequential without a keras.Input): build it on the student's image shape "
            "(keras.Input((height, width, channels))) and save it again."
        ) from None
    if not (isinstance(shape, tuple) and len(shape) == 4 and all(
        d is None or isinstance(d, int) for d in shape
    )):
        raise _teacher_error(
            teacher, f"takes inputs of shape {shape}; a teacher takes one batch of images "
            "(batch, height, width, channels)."
        )
    if image_size is not None:
        size = (image_size, image_size) if isinstance(image_size, int) else tuple(image_size)
        wanted = (*size, num_channels if num_channels is not None else shape[3])
        got = shape[1:]
        if any(g is not None and g != w for g, w in zip(got, wanted, strict=True)):
            raise _teacher_error(
                teacher, f"takes images of shape {got} (height, width, channels); the student "
                f"is trained on {wanted} (--image-size {size[0]}). Give a teacher of that input "
                "size, or the run an --image-size the teacher takes."
            )
    if not (isinstance(out, tuple) and len(out) == 2):
        raise _teacher_error(
            teacher, f"returns outputs of shape {out}; a teacher returns logits "
            "(batch, classes): give a classifier with its head."
        )
    if num_classes is not None and out[-1] != num_classes:
        raise _teacher_error(
            teacher, f"predicts {out[-1]} classes, not the student's {num_classes} classes."
        )
    return model


def distillation_loss(mode, teacher_logits, dist_logits, tau=1.0):
    """DeiT's distillation term (see the module docstring), a scalar."""
    teacher_logits = ops.cast(teacher_logits, "float32")
    dist_logits = ops.cast(dist_logits, "float32")
    if mode == "hard":
        target = ops.one_hot(ops.argmax(teacher_logits, axis=-1), ops.shape(dist_logits)[-1])
        return ops.mean(keras.losses.categorical_crossentropy(target, dist_logits, True))
    log_p = ops.log_softmax(dist_logits / tau, axis=-1)
    log_q = ops.log_softmax(teacher_logits / tau, axis=-1)
    kl = ops.sum(ops.exp(log_q) * (log_q - log_p))
    return kl * (tau * tau) / ops.cast(ops.size(dist_logits), "float32")


@keras.saving.register_keras_serializable(package="keras_vit")
class Distiller(keras.Model):
    """Trains a distillation-token student against a teacher in the same step (DeiT).

    Args:
        student: a ViT built with `distillation_token=True` and a classifier.
        teacher: a `keras.Model` (or `.keras` path) taking the student's inputs and returning
            logits over the same classes (a CNN is DeiT's choice).
        mode: `"hard"` or `"soft"`. Defaults to `"hard"` (DeiT's best).
        tau: float > 0. Soft distillation's temperature. Defaults to 1.
        alpha: float in [0, 1]. Weight of the distillation term. Defaults to 0.5 (DeiT).

    Compile it with the student's loss (on the class-token head) and metrics; they see the
    student's inference output (the average of both heads).

    Example:

    >>> import keras_vit
    >>> student = keras_vit.ViT("mu/8", image_size=16, num_classes=3, distillation_token=True)
    >>> teacher = keras_vit.ViT("mu/8", image_size=16, num_classes=3)
    >>> Distiller(student, teacher, "soft", tau=3.0).mode
    'soft'

    Reference:
        Touvron et al., 2021, "DeiT", Sec. 4.
    """

    def __init__(self, student, teacher, mode="hard", tau=1.0, alpha=0.5, **kwargs):
        super().__init__(**kwargs)
        if mode not in MODES:
            raise ValueError(
                f"distillation (--distillation) must be one of {MODES}. Received: {mode!r}"
            )
        if isinstance(tau, bool) or not isinstance(tau, (int, float)) or not tau > 0:
            raise ValueError(
                f"distillation_tau (--distillation-tau) must be > 0. Received: tau={tau!r}"
            )
        if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not 0 <= alpha <= 1:
            raise ValueError(f"alpha must be in [0, 1]. Received: alpha={alpha!r}")
        self.student = student
        head, head_dist = _heads(student)
        shape = student.input_shape
        self.teacher = check_teacher(
            teacher, image_size=shape[1:3] if None not in shape[1:3] else None,
            num_channels=shape[3], num_classes=head.output.shape[-1],
        )
        self.teacher.trainable = False
        self.mode = mode
        self.tau = float(tau)
        self.alpha = float(alpha)
        self._both_heads = keras.Model(student.inputs, [head.output, head_dist.output])

    @property
    def saved_model(self):
        """The model a run saves: the student."""
        return self.student

    def call(self, images, training=False):
        logits, logits_dist = self._both_heads(images, training=training)
        return ops.stack([logits, logits_dist], axis=1)

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        logits, logits_dist = y_pred[:, 0], y_pred[:, 1]
        if not training:  # evaluation: the student's output, the compiled loss
            return super().compute_loss(x, y, (logits + logits_dist) / 2, sample_weight, training)
        base = super().compute_loss(x, y, logits, sample_weight, training)
        teacher_logits = ops.stop_gradient(self.teacher(x, training=False))
        distill = distillation_loss(self.mode, teacher_logits, logits_dist, self.tau)
        return (1.0 - self.alpha) * base + self.alpha * ops.cast(distill, base.dtype)

    def compute_metrics(self, x, y, y_pred, sample_weight=None):
        return super().compute_metrics(x, y, ops.mean(y_pred, axis=1), sample_weight)

    def get_config(self):
        return {
            **super().get_config(),
            "student": keras.saving.serialize_keras_object(self.student),
            "teacher": keras.saving.serialize_keras_object(self.teacher),
            "mode": self.mode,
            "tau": self.tau,
            "alpha": self.alpha,
        }

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        for key in ("student", "teacher"):
            config[key] = keras.saving.deserialize_keras_object(config[key])
        return cls(**config)
