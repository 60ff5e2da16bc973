"""Hugging Face `transformers` folders in and out: `from_huggingface` (`reader`),
`export_huggingface` (`export`).

`common` is what every reader shares (a family's reader in `keras_vit/families/<name>/`
builds on it: `config.json`, the weights file, head arguments, skip notes, name-table rows, the
loading step); `vit` is transformers' `ViTModel` layout, the `model_type` read when no
registered family claims one; `input_spec` is the input spec and class names a folder
supplies. Nothing is imported here.
"""
