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

MODES = ("hard", "soft")


def _heads(student):
    """The student's class-token and distillation-token classifiers (its `heads` role)."""
    heads = getattr(student, "heads", None)
    if heads is None:  # functional models built before the model class
        heads = []
        for name in ("head", "head_dist"):
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
        self.teacher = load_teacher(teacher)
        self.teacher.trainable = False
        self.mode = mode
        self.tau = float(tau)
        self.alpha = float(alpha)
        head, head_dist = _heads(student)
        self._both_heads = keras.Model(student.inputs, [head.output, head_dist.output])
        student_classes = head.output.shape[-1]
        teacher_classes = self.teacher.output_shape[-1]
        if teacher_classes != student_classes:
            raise ValueError(
                f"The teacher must predict the student's {student_classes} classes. "
                f"Received: teacher output shape {self.teacher.output_shape}"
            )

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
