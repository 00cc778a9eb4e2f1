"""``python -m imagebuild`` is the ``imagebuild`` command."""

import sys

from imagebuild.cli import main

sys.exit(main())
