"""``python -m imagebuild_checks [flags]`` (in an image) or ``python -m imagebuild.inimage``."""

import sys

from .check_runner import main

if __name__ == "__main__":
    if sys.argv[1:2] == ["tune"]:  # the image's `imagebuild tune ...`
        from .tuning.command import main as tune_main

        sys.exit(tune_main(sys.argv[2:]))
    if sys.argv[1:2] == ["doctor"]:  # the image's `imagebuild doctor ...`
        from .doctor.cli import main as doctor_main

        sys.exit(doctor_main(sys.argv[2:]))
    if sys.argv[1:2] == ["screen"]:  # this node's screen (imagebuild screen runs it on each)
        from .screen.cli import main as screen_main

        sys.exit(screen_main(sys.argv[2:]))
    sys.exit(main())
