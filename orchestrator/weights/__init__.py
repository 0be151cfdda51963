"""A model's real weight files: revisions and their content digest (files.py), and the origins they are read
from (fetchers/: file://, package://, http(s)://, hf://, s3://). A node fills its cache through them and the
control plane reads a model's tokenizer through them, so they sit below both."""
