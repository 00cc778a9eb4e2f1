"""How a site launches the image, as the doctor's probes need it: the job's environment
(the site's container environment over this one, as the launchers merge them), the
site's binds, apptainer --rocm, and where the host's libfabric is."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

from imagebuild.inimage.doctor.libfabric import FabricSettings
from imagebuild.inimage.doctor.miopen import expand
from imagebuild.inimage.doctor.run import DoctorSettings
from imagebuild.recipe.site import SiteProfile
from imagebuild.recipe.site_runtime import site_binds, site_env


def doctor_settings(site: SiteProfile | None, environ: Mapping[str, str], root: Path,
                    bind_host_rocm: bool | None = None, libfabric_dir: str | None = None
                    ) -> DoctorSettings:
    env = dict(environ)
    env.update({key: expand(value, dict(environ)) for key, value in site_env(site).items()})
    policy = site.libfabric if site else None
    return DoctorSettings(
        root=root, env=env, in_image=False,
        fabric=FabricSettings(
            provided_by=policy.provided_by if policy else ("site" if libfabric_dir else None),
            library_dir=libfabric_dir or (policy.library_dir if policy else None)),
        binds=tuple(bind.spec() for bind in site_binds(site)),
        bind_host_rocm=bool(bind_host_rocm if bind_host_rocm is not None else
                            site.apptainer.bind_host_rocm if site else False))


def inside_image(settings: DoctorSettings) -> DoctorSettings:
    """The same settings as seen from inside the image: its loader and mount table."""
    return replace(settings, in_image=True, fabric=replace(settings.fabric, in_image=True))
