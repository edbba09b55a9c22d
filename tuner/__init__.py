import trainables  # noqa: F401 - first: it makes `model` this project's package (trainables/__init__.py)
