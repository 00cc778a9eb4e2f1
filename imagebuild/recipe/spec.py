"""The image's own recipe keys (``CORE``); the recipe format is ``CORE`` with each
component's section (``imagebuild.recipe.format``). The field types are in
``imagebuild.recipe.fields``.
"""

from __future__ import annotations

from imagebuild.recipe import grammar
from imagebuild.recipe.fields import TEXT, Int, Obj, Seq, Str, Table, exact_version, requirement
from imagebuild.recipe.gpu_targets import unknown_target

#: Newest recipe format this imagebuild reads (top-level ``version:``).
FORMAT_VERSION = 1

#: The components' sections (imagebuild.recipe.format) come right before this key: after the
#: image's own keys, before env, labels and dockerfile.
SECTIONS_BEFORE = "env"

#: The image's own recipe keys.
CORE = Obj(
    # Required in the merged recipe (a parent may provide them); `version` in every file.
    required=("version", "rocm", "base_image", "wheels"),
    description="An imagebuild recipe: one ROCm PyTorch image.",
    fields={
        "version": Int("the recipe format version", enum=(FORMAT_VERSION,)),
        "extends": Str("the name of a recipe file in the same directory (without .yaml)",
                       grammar.EXTENDS),
        "description": TEXT,
        "rocm": Str("a ROCm release like 7.0.2, or null for a CPU-only image",
                    grammar.ROCM_VERSION, nullable=True),
        "rocm_from": Str("base_image (ROCm installed in the base image, AMD's rocm/dev-* "
                         "images) or wheels (ROCm as Python wheels from TheRock's index: "
                         "multi-arch for 7.14 and 10.x, per GPU family with {family} in "
                         "wheels.index_url)", enum=("base_image", "wheels")),
        "base_image": Str("an image reference like rocm/dev-ubuntu-24.04:7.0.2-complete",
                          grammar.IMAGE_REFERENCE),
        "os_packages": Seq(Str("a Debian/Ubuntu package name, optionally =version",
                               grammar.OS_PACKAGE)),
        "rocm_prefix": Str("the absolute directory ROCm is installed in (default: the release "
                           "line's, /opt/rocm up to 7.2.x, /opt/rocm/core on 7.14.x, "
                           "/opt/rocm/core-X.Y from 10.0; Debian's own HIP/RCCL packages: "
                           "/usr)", grammar.ABSOLUTE_DIR),
        "build_packages": Seq(Str("a Debian/Ubuntu package name the source builds need "
                                  "(compilers, autotools, ROCm development packages)",
                                  grammar.OS_PACKAGE)),
        "sites": Seq(Str("the name of a site profile this image is made for, like lumi "
                         "(imagebuild/data/sites/ or the project's sites/)",
                         grammar.SITE_NAME)),
        "python": Str("a Python version like 3.12", grammar.PYTHON_VERSION),
        "wheels": Obj(
            required=("packages",),
            fields={
                "index_url": Str("an http(s):// or file:// URL, or an absolute directory "
                                 "({family} is replaced by the GPU family of gpu_targets: "
                                 "TheRock's legacy per-family layout)",
                                 grammar.INDEX_URL),
                "packages": Table(
                    key=Str("a normalized project name like torch or pytorch-triton-rocm",
                            grammar.PROJECT_NAME),
                    value=Str("an exact version with its local part, like "
                              "2.8.0+rocm7.0.2.lw.git245bf6ed", grammar.VERSION_TEXT,
                              check=exact_version),
                ),
                "pypi": Seq(Str("a PEP 508 requirement like numpy<2", check=requirement)),
            },
        ),
        "gpu_targets": Seq(Str("an AMD GPU target like gfx942 (never 'all')",
                               grammar.GFX_TARGET, explain=unknown_target)),
        "accept_untested_targets": Seq(Str(
            "a GPU target TheRock builds but does not release-test, accepted for this "
            "recipe's ROCm-from-wheels line (gfx90a)", grammar.GFX_TARGET,
            explain=unknown_target)),
        "env": Table(key=Str("an environment variable name, not one the image sets itself "
                             f"({', '.join(grammar.RESERVED_ENV)})", grammar.ENV_KEY),
                     value=Str("a single line of text without ${ (enroot and the Container "
                               "Engine replace ${NAME} with the host's value when a container "
                               "starts, docker, podman and Apptainer keep it literal; $NAME "
                               "is literal everywhere)", grammar.ENV_VALUE, free_text=True)),
        "labels": Table(key=Str("a label key like org.example.site (imagebuild.* and "
                                "org.opencontainers.image.base.* are set by imagebuild)",
                                grammar.LABEL_KEY), value=TEXT),
        "dockerfile": Obj(fields={
            "syntax": Str("a BuildKit frontend image like docker/dockerfile:1.7, or null for "
                          "the engine's built-in frontend", grammar.IMAGE_REFERENCE,
                          nullable=True),
        }),
    },
)
