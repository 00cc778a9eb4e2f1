"""``--launcher docker`` and ``--launcher podman``: the checks in an image, run by the
container engine (imagebuild.engine: docker through its SDK, podman through its CLI), with
host network and IPC and the GPUs passed through (how is the engine's business)."""

from __future__ import annotations

from imagebuild.engine.base import ContainerSpec, Engine, Mount
from imagebuild.images import missing_image
from imagebuild.validate.events import EventStream
from imagebuild.validate.invocation import (
    Invocation,
    container_command,
    container_env,
    container_mounts,
)
from imagebuild.validate.stage_checks import IMAGE_PACKAGE
from imagebuild.validate.target import Target


def container_spec(target: Target, invocation: Invocation) -> ContainerSpec:
    """The container that runs the checks in ``target``'s image (unit-tested)."""
    command = container_command(invocation)
    # Entrypoint: the runner's module (behind the loader-path shell when there is one).
    entry = command.index(IMAGE_PACKAGE) + 1
    return ContainerSpec(
        image=str(target.ref),
        entrypoint=tuple(command[:entry]),
        command=tuple(command[entry:]),
        env=container_env(invocation),
        mounts=tuple(Mount(bind.source, bind.target, bind.read_only)
                     for bind in container_mounts(invocation)),
        gpus=invocation.gpus,
    )


def run_in_engine(engine: Engine, target: Target, invocation: Invocation,
                  stream: EventStream) -> int:
    """Run the checks in ``engine``; their output goes into ``stream``."""
    if target.ref is not None and not engine.image_exists(target.ref):
        raise missing_image(target.ref, target.recipe, engine.backend,
                            docker_passed_over=bool(engine.selection_note))
    code = engine.run_container(container_spec(target, invocation), stream.feed)
    stream.close()
    return code
