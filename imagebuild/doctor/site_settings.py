"""How a site launches the image, as the doctor's probes need it: the job's environment
(the site's container environment over this one, as the launchers merge them), the
site's binds, apptainer --rocm, where the host's libfabric is, and the container runtime
(named by the launch, else implied by the site: the runtime of the artifact it consumes
first, a .sqsh for CSCS's Container Engine (enroot), a .sif for Apptainer)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

from imagebuild.inimage.doctor.libfabric import FabricSettings
from imagebuild.inimage.doctor.miopen import expand
from imagebuild.inimage.doctor.needs import ImageNeeds
from imagebuild.inimage.doctor.run import DoctorSettings
from imagebuild.inimage.doctor.runtime import RUNTIME_OF_FORMAT
from imagebuild.recipe.image_network import ImageNetwork
from imagebuild.recipe.site import SiteProfile
from imagebuild.recipe.site_runtime import site_binds, site_env


def site_runtime(site: SiteProfile | None) -> tuple[str | None, str]:
    """(runtime, what says so) of a site profile: its ``runtime`` where it names one, else
    the runtime of its first artifact format."""
    if site is None:
        return None, ""
    named = getattr(site, "runtime", None)
    if isinstance(named, str) and named:
        return named, f"site {site.name}'s runtime"
    first = site.formats[0] if site.formats else None
    runtime = RUNTIME_OF_FORMAT.get(first or "")
    return runtime, (f"site {site.name} runs .{first} images" if runtime else "")


def known_network(needs: ImageNeeds | None) -> ImageNetwork | None:
    """What the doctor knows of the image's network, to fit the site's environment to it as
    the EDF and the batch job do: an image without a network plugin gets no NCCL_NET and
    no libfabric variables (imagebuild.recipe.site_runtime.network_fit). Of an image with
    one it does not know the libfabric's providers: the profile's settings as written."""
    if needs is None or needs.plugin:
        return None
    # No ROCm release: the doctor reports a release the site does not run (its driver item),
    # it does not refuse to look.
    return ImageNetwork(plugin=None, verbs=True)


def doctor_settings(site: SiteProfile | None, environ: Mapping[str, str], root: Path,
                    bind_host_rocm: bool | None = None, libfabric_dir: str | None = None,
                    runtime: str | None = None, runtime_from: str = "",
                    needs: ImageNeeds | None = None) -> DoctorSettings:
    env = dict(environ)
    fitted = site_env(site, known_network(needs))
    env.update({key: expand(value, dict(environ)) for key, value in fitted.items()})
    policy = site.libfabric if site else None
    if runtime is None:
        runtime, runtime_from = site_runtime(site)
    return DoctorSettings(
        root=root, env=env, in_image=False,
        fabric=FabricSettings(
            provided_by=policy.provided_by if policy else ("site" if libfabric_dir else None),
            library_dir=libfabric_dir or (policy.library_dir if policy else None)),
        binds=tuple(bind.spec() for bind in site_binds(site)),
        bind_host_rocm=bool(bind_host_rocm if bind_host_rocm is not None else
                            site.apptainer.bind_host_rocm if site else False),
        runtime=runtime, runtime_from=runtime_from)


def inside_image(settings: DoctorSettings) -> DoctorSettings:
    """The same settings as seen from inside the image: its loader and mount table, and
    the container's own marks for the runtime, unless the launch named one."""
    implied = settings.runtime_from.startswith("site ")
    return replace(settings, in_image=True, fabric=replace(settings.fabric, in_image=True),
                   runtime=None if implied else settings.runtime,
                   runtime_from="" if implied else settings.runtime_from)
