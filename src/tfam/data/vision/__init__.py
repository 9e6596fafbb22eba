"""Image processing that is no dataset: batch augmentation (augment.py), opening image files
(imageio.py) and turning a user's images into model input (preprocess.py). The package face
imports nothing: import a module by its full name (``tfam.data`` re-exports the public names).
"""
