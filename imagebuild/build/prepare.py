"""What every image of one build shares: the recipe's lock, checked once, the plan made from
it, and the Dockerfile rendered once (the text committed in dockerfiles/ and staged in every
context of the build: the recipe's image, its reproducibility rebuild, a derived image)."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from imagebuild.errors import LockError
from imagebuild.lock.check import current_lock
from imagebuild.lock.epoch import EPOCH_BUILD_ARG
from imagebuild.lock.model import Lock
from imagebuild.recipe.model import Recipe
from imagebuild.render.context import BuildContext, build_context
from imagebuild.render.dockerfile import render_dockerfile
from imagebuild.render.plan import BuildPlan, plan_for


@dataclass(frozen=True)
class PreparedBuild:
    """A recipe with its checked lock, its plan and its rendered Dockerfile."""

    plan: BuildPlan
    dockerfile: str

    @property
    def recipe(self) -> Recipe:
        return self.plan.recipe

    @property
    def lock(self) -> Lock:
        assert self.plan.lock is not None  # prepare_build refuses an unlocked recipe
        return self.plan.lock

    def epoch_build_args(self) -> dict[str, str]:
        """SOURCE_DATE_EPOCH as a build arg: BuildKit >= 0.11 dates the image config and its
        history with it (docker/buildkit docs/build-repro.md). The python, final, plugin and
        hipBLASLt stages declare it and date what they write by it, so their layers are keyed
        on it and no layer written under another lock is reused; the squash clamps any later
        mtime in every case."""
        epoch = self.lock.source_date_epoch
        return {EPOCH_BUILD_ARG: str(epoch)} if epoch is not None else {}

    @contextmanager
    def staged_context(self, purpose: str = "") -> Iterator[BuildContext]:
        """The build context in a temporary directory, removed afterwards."""
        prefix = f"imagebuild-{self.recipe.name}-{purpose + '-' if purpose else ''}"
        with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
            yield build_context(self.plan, Path(tmp) / "context", dockerfile=self.dockerfile)


def prepare_build(recipe: Recipe) -> PreparedBuild:
    """Check ``recipe``'s lock (LockError when missing or stale), make the plan, render the
    Dockerfile: once for the whole build."""
    lock = current_lock(recipe)
    if lock is None:
        raise LockError(f"{recipe.name}: not locked; run `imagebuild lock {recipe.name}` first "
                        "(an image installs only what its lock pins)")
    plan = plan_for(recipe, lock)
    return PreparedBuild(plan, render_dockerfile(plan))
