"""The code that runs inside images: standard library and torch only (so it runs in any image, on any launcher).

- here: the check runner, its options, results, JSON report, GPU table (gpus.json), the
  image manifest reader, timing, the rank's context and place in the job;
- ``checks/``: the validation checks, one module each (CHECK_MODULES where a module name
  differs from its check's);
- ``model/``: the Llama model, which training step fits, FLOPs, the workload it implies;
- ``tuning/``: offline GEMM tuning (shapes, tune, bundle, verify), the image's
  ``imagebuild tune ...``.

This package is copied into every image (``imagebuild.render.context``; ``validate
--mount-checks`` stages it with ``imagebuild.validate.stage_checks``) and runs there as
``python3 -m imagebuild_checks``, where imagebuild itself is not installed. From a source
checkout it runs as ``python -m imagebuild.inimage``. Both accept the same flags and print
the same table and JSON report.

Nothing in this package may import anything outside the standard library and torch
(not yaml, not rich, not imagebuild): a test enforces it. Imports are relative so the
directory works under any package name.
"""

#: Version of the JSON report written by the runner (docs/validate-report.md).
REPORT_SCHEMA = "imagebuild-validate-report/1"

#: Every check, in the order the runner runs them (groups and repeated_init, the process
#: groups and communicators a framework builds, and rccl_tests, the image's own collective
#: benchmarks, beside collectives; the train step and the users' Megatron
#: run last: they take the most memory and the longest; the environment first: it explains
#: the failures after it).
CHECK_NAMES = (
    "environment",
    "devices",
    "gemm",
    "hipblaslt",
    "tuning",
    "attention",
    "collectives",
    "groups",
    "repeated_init",
    "rccl_tests",
    "network",
    "train",
    "megatron",
)
#: Check name -> module in checks/, where they differ (``tuning`` would read as the
#: tuning/ sub-package).
CHECK_MODULES = {"tuning": "tuning_in_effect"}
