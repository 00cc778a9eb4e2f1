"""The build stage's one path: a checked plan -> a staged context -> an image -> artifacts.

``prepare`` checks the lock and renders the Dockerfile once per build; ``image`` builds (or
finds) one image from a staged context and squashes it; ``pipeline`` is ``imagebuild build``;
``recheck`` is ``--check-reproducible``. A derived image with a tuning bundle
(imagebuild.tune.derive) goes through the same ``image.build_and_squash``.
"""
