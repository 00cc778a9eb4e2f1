"""The site profile format as data, in the recipe's field specs (``imagebuild.recipe.spec``).

``imagebuild.recipe.site`` checks every profile against ``SITE`` with the recipe's validator
(key paths, lines, every problem at once) before its own rules across fields (a bind's
source and target, a library directory inside a bind, reserved variables); ``json_schema()``
turns the same tree into schema/site.schema.json for editors, checked by `schema --check`.
"""

from __future__ import annotations

from typing import Any

from imagebuild.recipe import grammar
from imagebuild.recipe.fields import Bool, Int, Obj, Seq, Str, Table
from imagebuild.recipe.gpu_targets import unknown_target
from imagebuild.recipe.schema import to_schema
from imagebuild.recipe.site_rocm import SPEC as ROCM_SPEC
from imagebuild.recipe.site_runtime import (
    CPU_BIND,
    DISTRIBUTION,
    GPU_SELECTIONS,
    IFNAME,
    NET_PLUGINS,
    PROVIDER,
)
from imagebuild.recipe.site_sarus import SPEC as SARUS_SPEC

ENV_NAME = r"^[A-Za-z_][A-Za-z0-9_]*$"
ANNOTATION_KEY = r"^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$"
#: An EDF mount: SRC:DST[:FLAGS], flags joined with + (enroot's mount syntax).
EDF_MOUNT = r"^[^:\s]+:[^:\s]+(:[a-z]+(\+[a-z]+)*)?$"
#: A libfabric release as a site binds it, like 1.22.0.
RELEASE = r"^\d+\.\d+(\.\d+)?$"

_TEXT = Str("a single line of text", free_text=True, nullable=True)
_ENV = Table(key=Str("an environment variable name", ENV_NAME),
             value=Str("a string (quote numbers in YAML)", free_text=True), nullable=True)

SITE = Obj(
    required=("name",),
    description="An imagebuild site profile: what a cluster needs from an image and its "
                "container runtime.",
    fields={
        "extends": Str("the profile this one extends, by name: its keys merge under this "
                       "one's, a null removes one", grammar.SITE_NAME),
        "name": Str("a site name: lowercase letters, digits, '-' or '.'", grammar.SITE_NAME),
        "description": _TEXT,
        "gpu": Str("the GPU model, like MI300A", free_text=True, nullable=True),
        "gpu_targets": Seq(Str("an AMD GPU target like gfx942", grammar.GFX_TARGET,
                                  explain=unknown_target),
                           nullable=True),
        "formats": Seq(Str("an artifact format the site's runtime consumes: sqsh or sif",
                           enum=("sqsh", "sif")), nullable=True),
        "container": Obj(nullable=True, fields={
            "binds": Seq(Str("a host path bound into every container: SRC[:DST[:ro]], "
                             "absolute or starting with ${VAR}", free_text=True),
                         nullable=True),
            "env": _ENV,
        }),
        "network": Obj(nullable=True, fields={
            "socket_ifname": Str("interface names separated by commas, like \"hsn0,hsn1\"",
                                 IFNAME.pattern, nullable=True),
            "provider": Str("a libfabric provider name like cxi", PROVIDER.pattern,
                            nullable=True),
            "plugin": Str("who gives RCCL its network: image (the image's libfabric plugin, "
                          "pinned to the provider), site (the site runtime's plugin hook) or "
                          "none (RCCL's own InfiniBand/RoCE transport)", enum=NET_PLUGINS,
                          nullable=True),
        }),
        "slurm": Obj(nullable=True, fields={
            "gpus_per_node": Int("GPUs per node", minimum=1, nullable=True),
            "cpus_per_task": Int("CPUs per rank", minimum=1, nullable=True),
            "cpu_bind": Str("cores, threads, sockets, none or mask_cpu:MASK,MASK,... (one mask "
                            "per local rank)", CPU_BIND.pattern, nullable=True),
            "gpu_select": Str(f"one of {', '.join(GPU_SELECTIONS)}", enum=GPU_SELECTIONS,
                              nullable=True),
            "distribution": Str("srun --distribution: tasks to nodes, then to sockets, like "
                                "block:block", DISTRIBUTION.pattern, nullable=True),
            "exclusive": Bool(),
        }),
        "apptainer": Obj(nullable=True, fields={
            "bind_host_rocm": Bool(),
        }),
        "edf": Obj(nullable=True, fields={
            "image_dir": Str("the directory of the .sqsh on the cluster (${VAR} expanded at "
                             "run time), or null for the local artifact's path",
                             free_text=True, nullable=True),
            "workdir": Str("the working directory inside the container", free_text=True,
                           nullable=True),
            "writable": Bool(),
            "mounts": Seq(Str("SRC:DST[:FLAGS], flags joined with +", EDF_MOUNT),
                          nullable=True),
            "env": _ENV,
            "annotations": Table(key=Str("an annotation key like com.hooks.cxi.enabled",
                                         ANNOTATION_KEY),
                                 value=Str("a string (quote true and numbers in YAML)",
                                           free_text=True), nullable=True),
            "aws_ofi_nccl_hook": Obj(nullable=True, required=("annotation_prefix", "variants"),
                                     fields={
                "annotation_prefix": Str("an annotation key prefix like "
                                         "com.hooks.aws_ofi_nccl", ANNOTATION_KEY),
                "variants": Table(key=Str("a hook variant name like rocm6", ANNOTATION_KEY),
                                  value=Int("the ROCm major the variant is built for",
                                            minimum=1)),
            }),
        }),
        "references": Str("a YAML or JSON file of this system's expected figures for "
                          "imagebuild validate (system, gpus: {model: {check.figure: [value, "
                          "lower, upper, unit]}}), relative to this profile", free_text=True,
                          nullable=True),
        "history": Str("the JSON-lines file every imagebuild validate run on this system "
                       "appends its figures to (as --history does), an absolute path after "
                       "${VAR} and ~ are expanded, like ${SCRATCH}/imagebuild/history.jsonl",
                       free_text=True, nullable=True),
        "rocm": ROCM_SPEC,
        "sarus_suite": SARUS_SPEC,
        "libfabric": Obj(nullable=True, required=("provided_by",), fields={
            "provided_by": Str("site (the site binds its own libfabric) or image",
                               enum=("site", "image")),
            "version": Str("the release the site binds, like \"1.22.0\" (quote it)", RELEASE,
                           nullable=True),
            "library_dir": Str("an absolute directory inside the container; one component "
                               "may be * (the newest release there)",
                               grammar.RELEASE_DIR, nullable=True),
        }),
    },
)


def json_schema() -> dict[str, Any]:
    """The site profile format as JSON Schema (draft 2020-12) for editors and linters."""
    schema = to_schema(SITE)
    schema["required"] = list(SITE.required)
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "https://imagebuild.dev/schema/site.schema.json",
        "title": "imagebuild site profile",
        **schema,
    }
