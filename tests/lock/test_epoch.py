"""The lock's SOURCE_DATE_EPOCH: recorded when locking, kept when re-locking to the same
pins, renewed when a pin changes, and carried into the image as a label."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from imagebuild.errors import LockError
from imagebuild.lock.epoch import EPOCH_LABEL
from imagebuild.lock.lockfile import lock_path, read_lock
from imagebuild.lock.resolve import lock_recipe
from imagebuild.recipe.load import load_recipe
from imagebuild.render.plan import plan_for
from tests.lock.conftest import World

pytestmark = pytest.mark.integration


def lock(world: World) -> Path:
    recipe = load_recipe(str(world.recipe_path))
    lock_recipe(recipe, world.options)
    return lock_path(recipe)


def test_the_lock_records_when_it_was_written(world: World) -> None:
    before = int(time.time())
    path = lock(world)
    epoch = read_lock(path).source_date_epoch
    assert epoch is not None and before <= epoch <= time.time()
    plan = plan_for(load_recipe(str(world.recipe_path)), read_lock(path))
    assert (EPOCH_LABEL, str(epoch)) in plan.labels


def test_relocking_the_same_pins_keeps_the_time_and_the_bytes(world: World) -> None:
    path = lock(world)
    text = path.read_text()
    time.sleep(1.1)
    lock(world)
    assert path.read_text() == text


def test_a_changed_pin_records_a_new_time(world: World) -> None:
    path = lock(world)
    text = path.read_text()
    epoch = read_lock(path).source_date_epoch
    pinned = next(w for w in read_lock(path).wheels if w.name == "tqdm")
    # as if locked long ago to another tqdm file: re-locking changes that pin
    path.write_text(text.replace(f"source-date-epoch = {epoch}", "source-date-epoch = 1000")
                    .replace(pinned.sha256, "0" * 64))
    lock(world)
    assert read_lock(path).source_date_epoch >= epoch
    assert next(w for w in read_lock(path).wheels if w.name == "tqdm").sha256 == pinned.sha256


def test_a_malformed_time_is_a_malformed_lock(world: World) -> None:
    path = lock(world)
    epoch = read_lock(path).source_date_epoch
    path.write_text(path.read_text().replace(f"source-date-epoch = {epoch}",
                                             'source-date-epoch = "yesterday"'))
    with pytest.raises(LockError, match="source-date-epoch must be whole seconds"):
        read_lock(path)
