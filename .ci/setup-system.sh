#!/usr/bin/env bash
# Prepare a fresh Debian 12 machine (run as root) for imagebuild's integration tests:
# apt packages, a Docker daemon, a local registry on 127.0.0.1:5000 and podman storage.
# Idempotent: every step checks first and says what it did. No Docker Hub needed.
#
# Environment knobs:
#   IMAGEBUILD_DOCKERD_LOG      dockerd log file       (default /var/log/imagebuild-dockerd.log)
#   IMAGEBUILD_REGISTRY_ADDR    registry listen addr   (default 127.0.0.1:5000)
#   IMAGEBUILD_REGISTRY_DIR     registry storage dir   (default /var/lib/imagebuild-registry)
#   IMAGEBUILD_SKIP_APT=1       skip apt-get (packages already installed)
set -euo pipefail

DOCKERD_LOG=${IMAGEBUILD_DOCKERD_LOG:-/var/log/imagebuild-dockerd.log}
REGISTRY_ADDR=${IMAGEBUILD_REGISTRY_ADDR:-127.0.0.1:5000}
REGISTRY_DIR=${IMAGEBUILD_REGISTRY_DIR:-/var/lib/imagebuild-registry}
REGISTRY_CONFIG=/etc/imagebuild/registry-${REGISTRY_ADDR##*:}.yml
REGISTRY_LOG=/var/log/imagebuild-registry-${REGISTRY_ADDR##*:}.log
# Debian's docker client (20.10) builds with BuildKit when DOCKER_BUILDKIT=1; a newer
# client earlier on PATH may lack the buildx plugin and then cannot build at all.
DOCKER=/usr/bin/docker

say() { printf 'setup-system: %s\n' "$*"; }
started=$(date +%s)

if [[ $(id -u) -ne 0 ]]; then
    say "must run as root (installs packages, starts dockerd)" >&2
    exit 2
fi

# --- packages ---------------------------------------------------------------------------
PACKAGES=(
    docker.io            # dockerd 20.10 with embedded BuildKit + Debian's docker CLI
    podman buildah       # the second build backend (HPC nodes often have no Docker daemon)
    docker-registry      # distribution 2.8: a real registry for push / digest tests
    squashfs-tools squashfs-tools-ng siftool   # .sqsh and .sif artifacts
    debootstrap          # base images without Docker Hub
    git ca-certificates curl xz-utils
    shellcheck           # lints every job script of the generated CI pipelines
)
missing=()
for pkg in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' \
        || missing+=("$pkg")
done
if [[ ${#missing[@]} -eq 0 ]]; then
    say "apt packages already installed"
elif [[ ${IMAGEBUILD_SKIP_APT:-0} == 1 ]]; then
    say "IMAGEBUILD_SKIP_APT=1 but missing: ${missing[*]}" >&2
    exit 2
else
    say "installing: ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    # --no-install-recommends keeps the docker-registry package from pulling in a
    # systemd-managed service we do not use; the daemons are started below instead.
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
    say "installed: ${missing[*]}"
fi

# --- dockerd ----------------------------------------------------------------------------
if "$DOCKER" info >/dev/null 2>&1; then
    say "dockerd already answering"
else
    if [[ -d /run/systemd/system ]] && systemctl is-enabled docker.service >/dev/null 2>&1; then
        # The package's unit starts dockerd with the default bridge and iptables, which
        # fail on many CI VMs; it would then keep restarting and hold the pid file.
        say "stopping systemd's docker.service (not answering)"
        systemctl stop docker.service docker.socket >/dev/null 2>&1 || true
    fi
    say "starting dockerd (log: $DOCKERD_LOG)"
    # No bridge/iptables: CI VMs and containers often cannot create them; builds and
    # test containers use --network host instead. setsid: outlive this script's session.
    setsid nohup dockerd --bridge=none --iptables=false >"$DOCKERD_LOG" 2>&1 < /dev/null &
    for _ in $(seq 1 60); do
        "$DOCKER" info >/dev/null 2>&1 && break
        sleep 1
    done
    if ! "$DOCKER" info >/dev/null 2>&1; then
        say "dockerd did not answer within 60 s; last log lines:" >&2
        tail -n 20 "$DOCKERD_LOG" >&2 || true
        exit 1
    fi
    say "dockerd up: $("$DOCKER" version --format '{{.Server.Version}}' 2>/dev/null)"
fi

# --- local registry ---------------------------------------------------------------------
registry_up() { curl -fsS --max-time 2 "http://$REGISTRY_ADDR/v2/" >/dev/null 2>&1; }
if registry_up; then
    say "registry already answering on $REGISTRY_ADDR"
else
    # Debian's shipped config enables htpasswd auth and listens on all interfaces; the
    # tests want an open registry on loopback only. Installing the package may have
    # started that one on :5000 already.
    if [[ -d /run/systemd/system ]] && systemctl is-active docker-registry.service >/dev/null 2>&1
    then
        say "stopping systemd's docker-registry.service (it requires auth)"
        systemctl stop docker-registry.service >/dev/null 2>&1 || true
    fi
    mkdir -p "$(dirname "$REGISTRY_CONFIG")" "$REGISTRY_DIR"
    cat >"$REGISTRY_CONFIG" <<EOF
version: 0.1
log:
  level: warn
storage:
  filesystem:
    rootdirectory: $REGISTRY_DIR
  delete:
    enabled: true
http:
  addr: $REGISTRY_ADDR
EOF
    say "starting docker-registry on $REGISTRY_ADDR (config: $REGISTRY_CONFIG, log: $REGISTRY_LOG)"
    setsid nohup /usr/bin/docker-registry serve "$REGISTRY_CONFIG" >"$REGISTRY_LOG" 2>&1 \
        < /dev/null &
    for _ in $(seq 1 30); do
        registry_up && break
        sleep 0.5
    done
    if ! registry_up; then
        say "registry did not answer within 15 s; last log lines:" >&2
        tail -n 20 "$REGISTRY_LOG" >&2 || true
        exit 1
    fi
    say "registry up"
fi

# --- podman -----------------------------------------------------------------------------
# Rootful podman uses overlay when the kernel allows it; fall back to vfs otherwise (slow
# but universal). Plain-http access to the loopback registry for push tests.
mkdir -p /etc/containers/registries.conf.d
REGCONF=/etc/containers/registries.conf.d/50-imagebuild-local.conf
if [[ ! -f $REGCONF ]]; then
    cat >"$REGCONF" <<EOF
[[registry]]
location = "$REGISTRY_ADDR"
insecure = true
EOF
    say "podman: $REGISTRY_ADDR marked insecure (plain http) in $REGCONF"
fi
if podman info --format '{{.Store.GraphDriverName}}' >/dev/null 2>&1; then
    say "podman storage driver: $(podman info --format '{{.Store.GraphDriverName}}')"
else
    say "podman info failed with the default storage; switching to vfs"
    mkdir -p /etc/containers
    cat >/etc/containers/storage.conf <<'EOF'
[storage]
driver = "vfs"
runroot = "/run/containers/storage"
graphroot = "/var/lib/containers/storage"
EOF
    podman info --format '{{.Store.GraphDriverName}}' >/dev/null \
        && say "podman storage driver: vfs"
fi

say "done in $(( $(date +%s) - started )) s"
