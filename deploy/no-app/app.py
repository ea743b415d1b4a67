"""The worker image's app when it was built without one: serving it fails, saying what to do.

Build the image with your app (``--build-arg APP_DIR=path/to/app``, a directory holding
``app.py``), or the demo app with ``--build-arg APP_DIR=examples`` (its agents answer with a
scripted fake model when no model key is given).
"""

raise RuntimeError(
    "this worker image was built without an app: build it with --build-arg APP_DIR=path/to/app "
    "(a directory with app.py), or APP_DIR=examples for the demo app (deploy/README.md)"
)
