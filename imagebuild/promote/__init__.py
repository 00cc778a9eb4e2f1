"""Promotion by proof: tags in the registry that say an image passed validation, and stable
tags set only on such an image, never moved (``imagebuild promote``)."""
