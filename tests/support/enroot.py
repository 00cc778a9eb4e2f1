"""NVIDIA's enroot, built from source for tests, and containers started through it the way
enroot's users (and CSCS's Container Engine) start them.

The source is the v4.1.2 tag of a git bundle of NVIDIA/enroot in ../shared/fixtures/sources
(``IMAGEBUILD_SOURCE_FIXTURES`` overrides the directory). Its three git submodules are
replaced by Debian packages of the same upstreams (.ci/setup-system.sh installs them):
makeself (2.4.5, the version enroot pins), musl-tools (musl's ``musl-gcc`` specs, patched
for static PIE as enroot's deps/musl.patch patches its wrapper) and linux-libc-dev (the
kernel's uapi headers). The build takes about 5 s on 2 cores.

A container is made with ``enroot create`` (unsquashfs into enroot's data directory) and
run with ``enroot start``: starting a .sqsh directly needs /dev/fuse, which only root may
open on many CI machines, and both paths run the same runtime code afterwards
(src/runtime.sh ``runtime::start``). An unprivileged user runs enroot in a user namespace
of its own (enroot-nsenter --user), as on a cluster.
"""

from __future__ import annotations

import os
import pwd
import re
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from testbed.source_mirror import fixtures_dir

TAG = "v4.1.2"
BUNDLE = "enroot.bundle"
#: What building needs beyond a C toolchain: (command, Debian package).
TOOLS = (("make", "build-essential"), ("gcc", "build-essential"),
         ("makeself", "makeself"), ("git", "git"), ("unsquashfs", "squashfs-tools"),
         ("setpriv", "util-linux"), ("grpck", "passwd"))
#: The unprivileged account .ci/setup-system.sh creates for these tests.
TEST_USER = os.environ.get("IMAGEBUILD_ENROOT_USER", "imagebuild-enroot")
_SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


class EnrootUnavailable(Exception):
    """enroot cannot be built or run here; the message says why and what installs it."""


def missing_tools() -> list[str]:
    missing = [f"{command} ({package})" for command, package in TOOLS
               if shutil.which(command, path=_SYSTEM_PATH) is None]
    triplet = _gcc_triplet() if shutil.which("gcc") else ""
    musl = Path(f"/usr/lib/{triplet.removesuffix('-gnu')}-musl/musl-gcc.specs")
    if triplet and not musl.is_file():
        missing.append(f"{musl} (musl-tools)")
    return missing


def _gcc_triplet() -> str:
    return subprocess.run(["gcc", "-dumpmachine"], check=True, capture_output=True,
                          text=True).stdout.strip()


@dataclass(frozen=True)
class Enroot:
    """An installed enroot: ``prefix``/bin/enroot and its library, hooks and mounts."""

    prefix: Path
    version: str
    build_seconds: float

    @property
    def binary(self) -> Path:
        return self.prefix / "bin" / "enroot"


def build_enroot(work: Path, fixtures: Path | None = None) -> Enroot:
    """Build and install enroot under ``work`` (which must be new or empty)."""
    bundle = (fixtures or fixtures_dir()) / BUNDLE
    if not bundle.is_file():
        raise EnrootUnavailable(f"no enroot source: {bundle} is missing "
                                "(IMAGEBUILD_SOURCE_FIXTURES names the fixtures directory)")
    missing = missing_tools()
    if missing:
        raise EnrootUnavailable("building enroot needs " + ", ".join(missing)
                                + "; .ci/setup-system.sh installs them")
    started = time.monotonic()
    src, bare, prefix = work / "src", work / "enroot.git", work / "install"
    subprocess.run(["git", "clone", "-q", "--bare", str(bundle), str(bare)], check=True)
    src.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", str(bare), "archive", TAG], check=True,
                             capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(src)], input=archive, check=True)
    dist = src / "deps" / "dist"
    # deps/makeself: Debian's makeself is the same 2.4.5 release.
    makeself = src / "deps" / "makeself" / "makeself.sh"
    shutil.copy2("/usr/bin/makeself", makeself)
    makeself.chmod(0o755)
    # deps/linux-headers: the kernel uapi headers Debian installs under /usr/include.
    headers = dist / "linux" / "include"
    headers.mkdir(parents=True)
    for name in ("linux", "asm-generic"):
        shutil.copytree(f"/usr/include/{name}", headers / name, symlinks=True)
    triplet = _gcc_triplet()
    shutil.copytree(f"/usr/include/{triplet}/asm", headers / "asm", symlinks=True)
    (src / "deps" / "linux-headers" / ".stamp").touch()
    # deps/musl: Debian's musl with its gcc specs made to link static PIE, which enroot's
    # binaries are (the same change deps/musl.patch makes to musl's own wrapper).
    musl_lib = Path(f"/usr/lib/{triplet.removesuffix('-gnu')}-musl")
    specs = (musl_lib / "musl-gcc.specs").read_text()
    specs = specs.replace(f"%{{!shared: {musl_lib}/Scrt1.o}}",
                          f"%{{static-pie: {musl_lib}/rcrt1.o}} "
                          f"%{{!static-pie: %{{!shared: {musl_lib}/Scrt1.o}}}}")
    specs = re.sub(r"^-dynamic-linker (\S*)",
                   r"%{static-pie:-no-dynamic-linker -static -pie} "
                   r"%{!static-pie:-dynamic-linker \1}", specs, flags=re.MULTILINE)
    (dist / "musl" / "bin").mkdir(parents=True)
    (dist / "musl" / "musl-gcc.specs").write_text(specs)
    wrapper = dist / "musl" / "bin" / "musl-gcc"
    wrapper.write_text('#!/bin/sh\nexec "${REALGCC:-gcc}" "$@" -specs '
                       f'"{dist}/musl/musl-gcc.specs"\n')
    wrapper.chmod(0o755)
    (src / "deps" / "musl" / ".stamp").touch()
    build = subprocess.run(["make", "-C", str(src), "-s", f"-j{os.cpu_count() or 1}",
                            "install", f"prefix={prefix}"], capture_output=True, text=True,
                           check=False)
    if build.returncode != 0:
        raise EnrootUnavailable(f"building enroot {TAG} failed (exit {build.returncode}):\n"
                                + (build.stdout + build.stderr)[-3000:])
    version = subprocess.run([str(prefix / "bin" / "enroot"), "version"], check=True,
                             capture_output=True, text=True).stdout.strip()
    return Enroot(prefix, version, time.monotonic() - started)


@dataclass(frozen=True)
class User:
    name: str
    uid: int
    gid: int
    home: str

    @classmethod
    def named(cls, name: str) -> User:
        entry = pwd.getpwnam(name)
        return cls(entry.pw_name, entry.pw_uid, entry.pw_gid, entry.pw_dir)

    @property
    def is_root(self) -> bool:
        return self.uid == 0


class Container:
    """One ``enroot create``-d root filesystem, started as often as needed, as ``user``.

    Every path enroot writes (its runtime, cache, data and temporary directories) is under
    ``state``, owned by ``user``; the environment is the minimal one of a batch job
    (PATH, HOME), so nothing of the test process leaks into the container.
    """

    def __init__(self, enroot: Enroot, user: User, state: Path, name: str):
        self.enroot, self.user, self.name = enroot, user, name
        self.env = {"PATH": f"{enroot.prefix}/bin:{_SYSTEM_PATH}", "HOME": user.home,
                    "LC_ALL": "C"}
        for part in ("RUNTIME", "CACHE", "DATA", "TEMP", "CONFIG"):
            directory = state / part.lower()
            directory.mkdir(parents=True, exist_ok=True)
            os.chown(directory, user.uid, user.gid)
            self.env[f"ENROOT_{part}_PATH"] = str(directory)
        os.chown(state, user.uid, user.gid)
        self.data = Path(self.env["ENROOT_DATA_PATH"]) / name

    def _argv(self, argv: list[str]) -> list[str]:
        if self.user.is_root:
            return argv
        return ["setpriv", f"--reuid={self.user.uid}", f"--regid={self.user.gid}",
                "--init-groups", *argv]

    def run(self, argv: list[str], stdin: str | None = None, timeout: float = 600,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(self._argv(argv), env={**self.env, **(env or {})}, input=stdin,
                              capture_output=True, text=True, timeout=timeout, check=False)

    def create(self, image: Path) -> float:
        """``enroot create`` from ``image``; returns the seconds it took."""
        started = time.monotonic()
        proc = self.run([str(self.enroot.binary), "create", "--force", "--name", self.name,
                         str(image)])
        if proc.returncode != 0:
            raise AssertionError(f"enroot create {image} as {self.user.name} failed "
                                 f"(exit {proc.returncode}):\n{proc.stdout}{proc.stderr}")
        return time.monotonic() - started

    def remove(self) -> None:
        """Delete the root filesystem (an image's worth of disk); root may delete any."""
        shutil.rmtree(self.data, ignore_errors=True)

    def start(self, *command: str, options: tuple[str, ...] | list[str] = (),
              stdin: str | None = None, timeout: float = 600
              ) -> subprocess.CompletedProcess[str]:
        """``enroot start [options] NAME [command]``: /etc/rc through a login shell, with
        the image's /etc/environment, read-only root unless ``--rw``."""
        return self.run([str(self.enroot.binary), "start", *options, self.name, *command],
                        stdin=stdin, timeout=timeout)


def shared_directory(prefix: str) -> Path:
    """A new directory every user may enter (pytest's own are root's alone)."""
    directory = Path(tempfile.mkdtemp(prefix=prefix))
    directory.chmod(0o755)
    return directory


def environment(output: str) -> dict[str, str]:
    """``env`` output -> mapping (values are one line in these images)."""
    pairs = (line.split("=", 1) for line in output.splitlines() if "=" in line)
    return {key: value for key, value in pairs}
