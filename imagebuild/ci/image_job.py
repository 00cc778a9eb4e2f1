"""The shell lines of the image jobs, the same in both pipelines.

An image is built once, on a build runner, with the registry's stage cache, and pushed: its
build result (``build --json``: the pushed digest and canonical tag) is the build job's
artifact. The validation job, on a GPU runner, pulls that digest, validates it and
squashes it there; after a passed run of the default branch or a tag it marks the digest tested.
On a git tag, the promote job gives each tested image the tag as its stable tag.

Every line reads its values from the environment: the recipe ($RECIPE), the registry
($IMAGEBUILD_REGISTRY, its credentials $IMAGEBUILD_REGISTRY_USER/_PASSWORD), whether the
pipeline may write ($TRUSTED: the default branch or a tag), never from the YAML text.
"""

from __future__ import annotations

from imagebuild.ci.config import CIConfig

#: Where imagebuild writes images (`imagebuild squash`'s default); the image jobs put their
#: logs and validation report in artifacts/<recipe>/.
ARTIFACTS_DIR = "artifacts"
LOGS = f"{ARTIFACTS_DIR}/$RECIPE"
#: What the build job hands on: `imagebuild build --json` (pushed digest, canonical tag).
BUILD_RESULT = f"{LOGS}/build.json"
REPORT = f"{LOGS}/validate.json"


def login(config: CIConfig) -> str:
    """Log the engine in to the registry (pushes, pulls, and the cache's BuildKit)."""
    return (f"printf '%s' \"$IMAGEBUILD_REGISTRY_PASSWORD\" | {config.site.backend} login "
            '--username "$IMAGEBUILD_REGISTRY_USER" --password-stdin '
            '"${IMAGEBUILD_REGISTRY%%/*}"')


def cache_lines(config: CIConfig) -> list[str]:
    """``cache_args``: read the stage cache always, write it only where trusted."""
    if not config.cache:
        return ["cache_args=()"]
    repository = f'"$IMAGEBUILD_REGISTRY/{config.cache}"'
    return [f"cache_args=(--cache-from {repository})",
            f'if [ "$TRUSTED" = true ]; then cache_args+=(--cache-to {repository}); fi']


def _site_ca(config: CIConfig) -> list[str]:
    return [f"--site-ca {config.site.ca_certificate}"] if config.site.ca_certificate else []


def build_lines(config: CIConfig) -> list[str]:
    """Build with the stage cache and push; the result as JSON, the progress as the log."""
    command = " ".join(['imagebuild build "$RECIPE"', f"--backend {config.site.backend}",
                        *_site_ca(config), '"${cache_args[@]}"',
                        '--push "$IMAGEBUILD_REGISTRY" --json'])
    return [f'mkdir -p "{LOGS}"', login(config), *cache_lines(config),
            f'{{ {command} >"{BUILD_RESULT}"; }} 2>&1 | tee "{LOGS}/build.log"']


def _from_build_result(variable: str, expression: str) -> str:
    return (f"{variable}=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))"
            f"{expression})' \"{BUILD_RESULT}\")")


def validate_lines(config: CIConfig) -> list[str]:
    """Pull the pushed digest, validate it, squash it here, and mark it tested."""
    engine = config.site.backend
    cpu = [] if config.validate_gpu else ["--allow-cpu"]
    lines = [f'mkdir -p "{LOGS}"', login(config),
             _from_build_result("image", '["pushed"][0]'),
             _from_build_result("canonical", '["pushed_tags"][0]["ref"]'),
             f'{engine} pull "$image"',
             " ".join(['imagebuild validate "$image"', f"--launcher {engine}", *cpu,
                       f'--report "{REPORT}" 2>&1 | tee "{LOGS}/validate.log"'])]
    if config.site.squash:
        # squash and the EDF beside the .sqsh name the recipe: its latest build is this one
        lines += [f'{engine} tag "$image" "imagebuild/$RECIPE:latest"',
                  (f'imagebuild squash "$RECIPE" --backend {engine} '
                   f"--formats {','.join(config.site.squash)}")]
    if config.promote:
        lines.append('if [ "$TRUSTED" = true ]; then imagebuild promote tested "$canonical" '
                     f'--report "{REPORT}"{" --allow-cpu" if cpu else ""}; fi')
    return lines


def promote_lines() -> list[str]:
    """The git tag ($STABLE_TAG) as the stable tag of the tested canonical tag."""
    return [_from_build_result("canonical", '["pushed_tags"][0]["ref"]'),
            'imagebuild promote stable "$canonical" "$STABLE_TAG"']


def image_files(config: CIConfig, recipe: str) -> list[str]:
    """What `imagebuild squash` writes: artifacts/<recipe>.<format>, a .sha256 beside each."""
    return [f"{ARTIFACTS_DIR}/{recipe}.{kind}{suffix}"
            for kind in config.site.squash for suffix in ("", ".sha256")]
