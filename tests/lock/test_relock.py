"""Re-locking to the same pins keeps the lock's time even when the lock was written with its
tables' keys in another order (an earlier imagebuild listed the components' sources in
another order); a changed pin takes a new time."""

from __future__ import annotations

import tomllib
from pathlib import Path

import tomli_w

from imagebuild.lock.epoch import relock_text
from imagebuild.lock.lockfile import lock_text, read_lock
from imagebuild.recipe.load import load_recipe
from tests.render.conftest import REPO
from tests.support.render import FAKE_EPOCH, fake_sources, write_lock


def _reordered(text: str) -> str:
    """``text`` with its sources table in reverse key order, the header kept."""
    header = "".join(line for line in text.splitlines(True) if line.startswith("#"))
    document = tomllib.loads(text)
    tool = document["tool"]["imagebuild"]
    tool["sources"] = dict(reversed(tool["sources"].items()))
    return header + tomli_w.dumps(document)


def test_the_same_pins_in_another_order_keep_the_time(tmp_path: Path) -> None:
    recipe = load_recipe("rocm-7.0.2", REPO)
    path = tmp_path / "pylock.rocm-7.0.2.toml"
    lock = write_lock(recipe, path)
    assert len(lock.sources) > 1 and lock.source_date_epoch == FAKE_EPOCH
    written = path.read_text()
    path.write_text(_reordered(written))
    assert path.read_text() != written
    packages = tomllib.loads(written)["packages"]

    def render(epoch: int | None) -> str:
        return lock_text(recipe, packages, base_digest=lock.base_digest,
                         wheel_index=recipe.wheels.index_url, sources=fake_sources(recipe),
                         source_date_epoch=epoch)

    assert relock_text(path, render) == written


def test_a_changed_pin_takes_a_new_time(tmp_path: Path) -> None:
    recipe = load_recipe("rocm-7.0.2", REPO)
    path = tmp_path / "pylock.rocm-7.0.2.toml"
    lock = write_lock(recipe, path)
    path.write_text(_reordered(path.read_text()).replace(
        lock.sources["megatron"].commit, "0" * 40))  # type: ignore[union-attr]
    packages = tomllib.loads(path.read_text())["packages"]
    text = relock_text(path, lambda epoch: lock_text(
        recipe, packages, base_digest=lock.base_digest, wheel_index=recipe.wheels.index_url,
        sources=fake_sources(recipe), source_date_epoch=epoch))
    path.write_text(text)
    assert read_lock(path).source_date_epoch != FAKE_EPOCH
