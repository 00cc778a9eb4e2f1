"""Install the pinned uv binary from its PyPI wheel, verified by sha256 (imagebuild).

Runs inside the image build (python stage) with the base image's own Python and the
standard library only: base images need neither pip nor curl. The rendered Dockerfile
passes the pins, so a changed pin invalidates that build step.

usage: fetch-uv.py DEST ARCH URL SHA256 [ARCH URL SHA256 ...]

The wheel for this machine's architecture is downloaded (3 tries), its sha256 compared
with the pin before anything is unpacked, and the ``uv`` executable from the wheel's
scripts directory written to DEST. TLS trusts SSL_CERT_FILE when it is set (the build
sets it from the site-ca secret).
"""

import hashlib
import os
import platform
import sys
import time
import urllib.request
import zipfile
from io import BytesIO

from buildtime import fail

TRIES = 3
TIMEOUT_S = 60



def download(url):
    for attempt in range(1, TRIES + 1):
        try:
            with urllib.request.urlopen(url, timeout=TIMEOUT_S) as response:
                return response.read()
        except OSError as exc:
            if attempt == TRIES:
                fail(f"cannot download {url} after {TRIES} tries: {exc}")
            time.sleep(2 * attempt)
    raise AssertionError("unreachable")


def main(argv):
    if len(argv) < 4 or (len(argv) - 1) % 3:
        fail("usage: fetch-uv.py DEST ARCH URL SHA256 [ARCH URL SHA256 ...]")
    dest = argv[0]
    pins = {argv[i]: (argv[i + 1], argv[i + 2]) for i in range(1, len(argv), 3)}
    machine = platform.machine()
    if machine not in pins:
        fail(f"no uv wheel pinned for {machine} (pinned: {', '.join(sorted(pins))})")
    url, sha256 = pins[machine]
    data = download(url)
    digest = hashlib.sha256(data).hexdigest()
    if digest != sha256:
        fail(f"sha256 mismatch for {url}: expected {sha256}, got {digest}")
    with zipfile.ZipFile(BytesIO(data)) as wheel:
        members = [n for n in wheel.namelist() if n.endswith(".data/scripts/uv")]
        if len(members) != 1:
            fail(f"{url} holds no single .data/scripts/uv (found {members!r})")
        binary = wheel.read(members[0])
    tmp = dest + ".tmp"
    with open(tmp, "wb") as handle:
        handle.write(binary)
    os.chmod(tmp, 0o755)
    os.replace(tmp, dest)
    name = url.rsplit("/", 1)[-1]
    sys.stdout.write(f"fetch-uv: installed {name} (sha256 {digest}) as {dest}\n")


if __name__ == "__main__":
    main(sys.argv[1:])
