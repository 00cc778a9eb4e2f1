"""RCCL's example tuner plugin: the recipe section and its rules."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from imagebuild.components.protocol import (
    Component,
    ProblemAt,
    RecipeData,
    SectionData,
    needs_rocm,
    refused_with_rocm_wheels,
    require_keys,
)
from imagebuild.recipe import grammar
from imagebuild.recipe.model import Recipe
from imagebuild.recipe.spec import Bool, Obj, Str

NAME = "rccl_tuner"


@dataclass(frozen=True)
class RcclTuner:
    """RCCL's example tuner plugin from a source archive pinned by sha256, built against
    the image's RCCL; ``interface_adapter`` adds the v4 interface RCCL 2.27 looks up."""

    enabled: bool
    url: str = ""
    sha256: str = ""
    example_dir: str = "ext-tuner/example"
    interface_adapter: bool = True
    #: A tuner configuration file, relative to the project; None: the image sets none.
    config: str | None = None

    def lock_inputs(self) -> dict[str, Any]:
        return {}  # the recipe pins the archive by its sha256: nothing to lock


def section(recipe: Recipe) -> RcclTuner | None:
    """The recipe's tuner section when it builds the tuner."""
    found = recipe.components.get(NAME)
    return found if isinstance(found, RcclTuner) and found.enabled else None


SPEC = Obj(
    description="RCCL's example tuner plugin (ext-tuner/example: a CSV of algorithm, protocol "
                "and channels per collective and size range), from a source archive pinned by "
                "sha256: built against the image's RCCL into /opt/rccl-tuner, checked to "
                "export a tuner interface that RCCL looks up, and named by NCCL_TUNER_PLUGIN",
    fields={
        "enabled": Bool(),
        "url": Str("an http(s):// URL of a source archive with one top-level directory",
                   grammar.ARCHIVE_URL),
        "sha256": Str("the archive's sha256, 64 lowercase hex digits", grammar.SHA256),
        "example_dir": Str("the example's directory in the archive, below its top-level "
                           "directory, like ext-tuner/example", grammar.SUBDIR),
        "interface_adapter": Bool("true or false: also export ncclTunerPlugin_v4 (RCCL "
                                  "2.27's interface) from the example's v5 functions"),
        "config": Str("a tuner configuration in the project, like tuning/nccl_tuner.conf "
                      "(`imagebuild tune rccl --sweep-results` writes one): copied into the "
                      "image, which sets NCCL_TUNER_CONFIG_FILE to it", grammar.SUBDIR,
                      nullable=True),
    })
DEFAULTS = {"enabled": False, "example_dir": "ext-tuner/example", "interface_adapter": True}


def rules(tuner: SectionData, recipe: RecipeData, problem: ProblemAt) -> None:
    needs_rocm(NAME, recipe, problem, ": the plugin is checked against the image's RCCL")
    require_keys(NAME, tuner, ("url", "sha256"), problem)
    refused_with_rocm_wheels(NAME, recipe, problem,
                             "the tuner stage checks the plugin against the base image's "
                             "RCCL (rocm_prefix), which such a base does not have")


def read(tuner: SectionData, recipe: RecipeData) -> RcclTuner:
    return RcclTuner(enabled=tuner["enabled"], url=tuner.get("url", ""),
                     sha256=tuner.get("sha256", ""), example_dir=tuner["example_dir"],
                     interface_adapter=tuner["interface_adapter"], config=tuner.get("config"))


COMPONENT = Component(
    name=NAME, title="RCCL tuner", folder=Path(__file__).resolve().parent,
    spec=SPEC, defaults=DEFAULTS, read=read, rules=rules,
)
