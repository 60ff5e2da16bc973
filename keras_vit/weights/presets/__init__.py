"""Named pretrained weights (`ViTB16(weights="imagenet21k")`): the `catalogue` of official
`.npz` files and their `download` through `keras.utils.get_file`.

A preset is an official `.npz` file, so this package reads `keras_vit.weights.npz`; it is the
only source package that imports another. `keras_vit.weights` re-exports the public names.
Nothing is imported here.
"""
