"""The shell lines an image job runs, the same in both pipelines: build and squash, then
validate with the engine that built the image; and the files those steps leave behind."""

from __future__ import annotations

from imagebuild.ci.config import CIConfig

#: Where imagebuild writes images (`imagebuild squash`'s default); the image jobs put their
#: logs and validation report in artifacts/<recipe>/.
ARTIFACTS_DIR = "artifacts"


def build_command(config: CIConfig, log: str, push_flag: str) -> str:
    """The build line; the recipe comes from $RECIPE and never from the YAML text."""
    parts = ['imagebuild build "$RECIPE"', f"--backend {config.site.backend}"]
    if config.site.squash:
        parts.append(f"--squash {','.join(config.site.squash)}")
    if config.site.ca_certificate:
        parts.append(f"--site-ca {config.site.ca_certificate}")
    if push_flag:
        parts.append(push_flag)
    return " ".join(parts) + f' 2>&1 | tee "{log}"'


def validate_command(config: CIConfig, report: str, log: str) -> str:
    cpu = "" if config.validate_gpu else " --allow-cpu"
    # The engine that built the image runs it: no export to another runtime in between.
    return (f'imagebuild validate "$RECIPE" --launcher {config.site.backend}{cpu} '
            f'--report "{report}" 2>&1 | tee "{log}"')


def image_files(config: CIConfig, recipe: str) -> list[str]:
    """What `imagebuild squash` writes: artifacts/<recipe>.<format>, a .sha256 beside each."""
    return [f"{ARTIFACTS_DIR}/{recipe}.{kind}{suffix}"
            for kind in config.site.squash for suffix in ("", ".sha256")]
