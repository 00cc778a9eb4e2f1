"""``python -m imagebuild_checks [flags]`` (in an image) or ``python -m imagebuild.validate.checks``."""

import sys

from .runner import main

if __name__ == "__main__":
    sys.exit(main())
