"""The data axis: a batch that does not split evenly over it is a clear error, before the step.

Keras splits every batch of `fit`, `evaluate` and `predict` over the data axis of the mesh
(`Distribution.get_data_layout`); a batch that the axis does not divide ends in JAX's
`IndivisibleError` deep inside the step. `DataAxisCheck.get_data_layout` (mixed into
`RoleParallel` and `CheckedDataParallel`) refuses it first, saying which batch and why.
"""

import keras


def data_parallel_parts(distribution):
    """How many equal shares a batch splits into under `distribution` (its data axis)."""
    mesh = distribution.device_mesh
    name = distribution.batch_dim_name or mesh.axis_names[0]
    return int(mesh.shape[list(mesh.axis_names).index(name)])


def check_batch(batch, parts, processes=1):
    """A ValueError when a batch of `batch` examples (in each of `processes` processes) does not
    split into `parts` equal shares."""
    total = batch * processes
    if parts > 1 and total % parts:
        per = f" ({batch} in each of {processes} processes)" if processes > 1 else ""
        raise ValueError(
            f"A batch of {total} examples{per} does not split over the {parts} devices of the "
            f"data axis: keras.distribution gives each an equal share. Use a batch size that is "
            f"a multiple of {parts}; fit, evaluate and predict also cut a last, smaller batch "
            f"from the rest of the data, so make the number of examples a multiple of the "
            f"batch size (or of {parts}) too."
        )


class DataAxisCheck:
    """`get_data_layout` that checks the batch first (a mixin for a Keras `Distribution`)."""

    def get_data_layout(self, data_shape):
        if len(data_shape) and data_shape[0] is not None:
            check_batch(int(data_shape[0]), data_parallel_parts(self), self.num_processes)
        return super().get_data_layout(data_shape)


class CheckedDataParallel(DataAxisCheck, keras.distribution.DataParallel):
    """Keras' `DataParallel` that names a batch its devices do not divide."""
