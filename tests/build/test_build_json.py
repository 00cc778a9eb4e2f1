"""`imagebuild build --json` without Docker: the engine replays captured BuildKit output
(tests/engine/fakes.py), the image's files are a small root filesystem squashed for real,
and stdout is the JSON document alone: the build, then the no-op that finds it."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

import pytest

from imagebuild.cli import main
from tests.build.test_build_path import (  # noqa: F401  (opened, project: pytest fixtures)
    RECIPE,
    LabelledEngine,
    opened,
    project,
)


def test_build_json_is_the_result_alone_and_true_to_the_files(
        project: Path, opened: list[Any], monkeypatch: pytest.MonkeyPatch,  # noqa: F811
        capsys: pytest.CaptureFixture[str]) -> None:
    engine = LabelledEngine(builds=1)
    monkeypatch.setattr("imagebuild.commands.engine_choice.open_engine",
                        lambda *args, **kwargs: engine)
    command = ["build", RECIPE, "--squash", "sqsh", "--read", "export", "--json"]
    assert main(command) == 0
    first = json.loads(capsys.readouterr().out)  # nothing but the document on stdout
    assert first["recipe"] == RECIPE and first["built"] is True
    assert first["image"] == f"imagebuild/{RECIPE}:{first['image'].split(':')[1]}"
    assert f"imagebuild/{RECIPE}:latest" in first["tags"]
    assert first["image_id"] == engine.images[first["image"]]
    [sqsh] = [a for a in first["artifacts"] if a["kind"] == "sqsh"]
    data = Path(sqsh["path"]).read_bytes()
    assert sqsh["size"] == len(data) and sqsh["sha256"] == hashlib.sha256(data).hexdigest()
    assert Path(sqsh["path"]).parent == project / "artifacts"
    assert {"prepare", "build", "squash"} <= set(first["seconds"]) and first["pushed"] == []
    # the replayed BuildKit log's steps, per stage; this engine attaches no provenance, and
    # the document says so
    assert first["stages"] and all(set(row) == {"imported", "cached", "built"}
                                   for row in first["stages"].values())
    assert sum(len(row["built"]) for row in first["stages"].values()) > 0
    assert first["provenance"].endswith("makes no provenance attestations")
    # the OCI labels go in at build time, the date the lock's epoch
    labels = engine.requests[0].labels
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ",
                        labels["org.opencontainers.image.created"])
    # Again with nothing changed: the same image and artifacts, nothing built.
    assert main(command) == 0
    second = json.loads(capsys.readouterr().out)
    assert second["built"] is False and len(engine.requests) == 1
    assert second["stages"] is None and second["provenance"] is None
    assert (second["image"], second["image_id"]) == (first["image"], first["image_id"])
    assert [a["sha256"] for a in second["artifacts"]] == [a["sha256"] for a in first["artifacts"]]
