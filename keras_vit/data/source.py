"""`Source`, one split of a dataset before preprocessing, and the split policy of the sources
that hold out a test split themselves (digits, folders without split folders)."""

import dataclasses

IMAGE_EXTENSIONS = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".webp")
TEST_FRACTION = 0.3
SPLIT_SEED = 0
CORRUPT_MODES = ("error", "skip")


@dataclasses.dataclass
class Source:
    """A split of a dataset before preprocessing.

    Attributes:
        dataset: `tf.data.Dataset` of `(image uint8 (H, W, C), label int64)`; images may differ in
            size unless `image_shape` is set.
        num_examples: int.
        num_classes: int.
        name: str. The spec it came from.
        default_flip: bool. Whether horizontal flips suit the data (False for digits).
        image_shape: optional (H, W, C) when all images share one shape.
        make_example: optional callable, index (int64 tensor) -> `(image, label)`, for sources
            that can make any example from its index (`synthetic`): the training pipeline then
            shuffles indices, a buffer that fills at once, instead of whole images.
    """

    dataset: object
    num_examples: int
    num_classes: int
    name: str
    default_flip: bool = True
    image_shape: tuple = None
    make_example: object = None

