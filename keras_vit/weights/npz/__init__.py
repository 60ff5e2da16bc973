"""The official google-research/vision_transformer `.npz` checkpoints: `checkpoints`
(`load_npz`, `save_npz`, `read_npz`, `check_npz`) and their array `names` (`NAME_TABLE`).

`keras_vit.weights` re-exports the public names. Nothing is imported here.
"""
