#!/usr/bin/env bash
# Prepare a fresh Debian 12 machine (run as root) for imagebuild's integration tests:
# apt packages, a Docker daemon, a local registry on 127.0.0.1:5000, podman storage, a
# one-node SLURM cluster (munge, slurmctld, slurmd), and what building enroot from source
# needs plus an unprivileged user to run it as.
# Idempotent: every step checks first and says what it did. No Docker Hub needed.
#
# Environment knobs:
#   IMAGEBUILD_DOCKERD_LOG      dockerd log file       (default /var/log/imagebuild-dockerd.log)
#   IMAGEBUILD_REGISTRY_ADDR    registry listen addr   (default 127.0.0.1:5000)
#   IMAGEBUILD_REGISTRY_DIR     registry storage dir   (default /var/lib/imagebuild-registry)
#   IMAGEBUILD_SLURM_DIR        SLURM state, spool and logs (default /var/lib/imagebuild-slurm)
#   IMAGEBUILD_ENROOT_USER      unprivileged user the enroot and rootless podman tests run as
#                               (default imagebuild-enroot)
#   IMAGEBUILD_BUILDKIT_ROOT    where Debian trixie's dockerd, containerd and buildx are
#                               unpacked for the registry-cache tests
#                               (default /opt/imagebuild-buildkit)
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
    binutils             # readelf: the network-plugin check reads symbol versions from ELF files
    libamdhip64-5 libhsa-runtime64-1 librocm-smi64-1   # Debian's real ROCm 5.2.3 HIP, HSA and
                         # rocm_smi libraries: the doctor's loader walk and SMI item run on them
    shellcheck           # lints every job script of the generated CI pipelines
    uidmap python3       # rootless podman as an unprivileged user (newuidmap), and the
                         # system Python that runs imagebuild as that user
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

# --- SLURM: a one-node cluster ---------------------------------------------------------
# Debian's slurmctld/slurmd 22.05 and munge, started without systemd, so that the sbatch
# launcher of `imagebuild validate` is tested by submitting real jobs. No cgroups (CI VMs
# and containers rarely delegate them): processes are tracked through /proc
# (proctrack/linuxproc) and bound with sched_setaffinity (task/affinity), which is all
# `srun --cpu-bind` needs.
SLURM_PACKAGES=(slurmctld slurmd slurm-client munge)
slurm_missing=()
for pkg in "${SLURM_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' \
        || slurm_missing+=("$pkg")
done
if [[ ${#slurm_missing[@]} -eq 0 ]]; then
    say "slurm packages already installed"
elif [[ ${IMAGEBUILD_SKIP_APT:-0} == 1 ]]; then
    say "IMAGEBUILD_SKIP_APT=1 but missing: ${slurm_missing[*]}" >&2
    exit 2
else
    say "installing: ${slurm_missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${slurm_missing[@]}" >/dev/null
    say "installed: ${slurm_missing[*]}"
fi

# The node and the controller go by the short host name: slurmd registers under it and
# jobs get it from `scontrol show hostnames` as their rendezvous host, so it must resolve
# to an address of this machine.
SLURM_NODE=$(hostname -s)
is_local_address() {
    [[ $1 == 127.* || $1 == ::1 ]] && return 0
    local address
    for address in $(hostname -I 2>/dev/null); do
        [[ $address == "$1" ]] && return 0
    done
    return 1
}
node_address=$(getent ahostsv4 "$SLURM_NODE" 2>/dev/null | awk 'NR == 1 { print $1 }' || true)
if [[ -z $node_address ]]; then
    printf '127.0.0.1\t%s\t# imagebuild-slurm\n' "$SLURM_NODE" >>/etc/hosts
    say "slurm: $SLURM_NODE did not resolve; added it to /etc/hosts as 127.0.0.1"
elif ! is_local_address "$node_address"; then
    # The first matching line of /etc/hosts wins: ours goes first, the rest stays. Written
    # in place because a container's /etc/hosts is often a bind mount.
    hosts_before=$(cat /etc/hosts)
    { printf '127.0.0.1\t%s\t# imagebuild-slurm\n' "$SLURM_NODE"; printf '%s\n' "$hosts_before"; } \
        >/etc/hosts
    say "slurm: $SLURM_NODE resolved to $node_address (not this machine); now 127.0.0.1"
else
    say "slurm: node name $SLURM_NODE resolves to $node_address"
fi

# munge: slurm's authentication. /run is a tmpfs, so /run/munge is gone after a reboot.
munge_up() { munge -n 2>/dev/null | unmunge >/dev/null 2>&1; }
if munge_up; then
    say "munged already answering"
else
    install -d -o munge -g munge -m 0755 /run/munge
    install -d -o munge -g munge -m 0700 /etc/munge /var/lib/munge /var/log/munge
    if [[ ! -s /etc/munge/munge.key ]]; then
        if [[ -x /usr/sbin/mungekey ]]; then
            /usr/sbin/mungekey --create --keyfile=/etc/munge/munge.key
        else
            /usr/sbin/create-munge-key -f
        fi
        say "munge: created /etc/munge/munge.key"
    fi
    chown munge:munge /etc/munge/munge.key
    chmod 0400 /etc/munge/munge.key
    # --force: a socket or lock left by a munged that died (a reboot, a killed container)
    # would otherwise keep it from starting.
    runuser -u munge -- /usr/sbin/munged --force
    for _ in $(seq 1 20); do
        munge_up && break
        sleep 0.25
    done
    if ! munge_up; then
        say "munged did not answer within 5 s; last log lines:" >&2
        tail -n 20 /var/log/munge/munged.log >&2 || true
        exit 1
    fi
    say "munged up"
fi

SLURM_DIR=${IMAGEBUILD_SLURM_DIR:-/var/lib/imagebuild-slurm}
SLURM_CONF=/etc/slurm/slurm.conf
SLURM_MARK="# Written by imagebuild .ci/setup-system.sh"
if [[ -f $SLURM_CONF ]] && ! grep -qF "$SLURM_MARK" "$SLURM_CONF"; then
    say "slurm: $SLURM_CONF was not written by this script; leaving this SLURM alone" >&2
    exit 2
fi
install -d -m 0755 /etc/slurm "$SLURM_DIR" "$SLURM_DIR/state" "$SLURM_DIR/spool" \
    "$SLURM_DIR/log"
# Sockets, cores, threads and memory as slurmd itself counts them; the node name is ours
# (slurmd -C prints the full host name on some systems).
node_line=$(slurmd -C | awk -v node="$SLURM_NODE" 'NR == 1 { $1 = "NodeName=" node; print }')
slurm_conf_new="$SLURM_MARK: a one-node cluster for the tests.
ClusterName=imagebuild-ci
SlurmctldHost=$SLURM_NODE
AuthType=auth/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$SLURM_DIR/state
SlurmdSpoolDir=$SLURM_DIR/spool
SlurmctldPidFile=$SLURM_DIR/slurmctld.pid
SlurmdPidFile=$SLURM_DIR/slurmd.pid
SlurmctldLogFile=$SLURM_DIR/log/slurmctld.log
SlurmdLogFile=$SLURM_DIR/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/affinity
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
ReturnToService=2
MinJobAge=16
$node_line
PartitionName=debug Nodes=$SLURM_NODE Default=YES MaxTime=INFINITE State=UP"
# MinJobAge: sbatch --wait polls after 2, 8, 32, 32... s unless a finished job's record
# lives shorter than twice the next interval (slurm 22.05 src/sbatch/sbatch.c, _job_wait):
# with 16 s it polls every 8 s, and a 16 s job is seen done within 8 s, not 26.
slurm_restart=0
if [[ -f $SLURM_CONF ]] && [[ $(cat "$SLURM_CONF") == "$slurm_conf_new" ]]; then
    say "slurm: $SLURM_CONF up to date"
else
    printf '%s\n' "$slurm_conf_new" >"$SLURM_CONF"
    slurm_restart=1
    say "slurm: wrote $SLURM_CONF ($node_line)"
fi

# A daemon is running when its pid file names a live process of that name; any other pid
# file is stale (left by a reboot or a killed container) and goes.
slurm_daemon_pid() {
    local pid
    pid=$(cat "$SLURM_DIR/$1.pid" 2>/dev/null) || return 1
    [[ $pid =~ ^[0-9]+$ && $(cat "/proc/$pid/comm" 2>/dev/null) == "$1" ]] || return 1
    printf '%s\n' "$pid"
}
for daemon in slurmctld slurmd; do
    if pid=$(slurm_daemon_pid "$daemon"); then
        if [[ $slurm_restart == 0 ]]; then
            say "slurm: $daemon already running (pid $pid)"
            continue
        fi
        say "slurm: stopping $daemon (pid $pid) for the new configuration"
        kill "$pid"
        for _ in $(seq 1 40); do
            [[ -d /proc/$pid ]] || break
            sleep 0.25
        done
    elif [[ -e $SLURM_DIR/$daemon.pid ]]; then
        rm -f "$SLURM_DIR/$daemon.pid"
        say "slurm: removed stale $SLURM_DIR/$daemon.pid"
    fi
    # -D: in the foreground under setsid/nohup, like dockerd above, so that what it prints
    # before its log file opens is kept too.
    setsid nohup "$daemon" -D >"$SLURM_DIR/log/$daemon.out" 2>&1 </dev/null &
    say "slurm: started $daemon (log: $SLURM_DIR/log/$daemon.log)"
    if [[ $daemon == slurmctld ]]; then
        for _ in $(seq 1 40); do
            scontrol ping 2>/dev/null | grep -q 'is UP' && break
            sleep 0.25
        done
    fi
done

slurm_node_state() { sinfo --noheader --nodes="$SLURM_NODE" --format=%t 2>/dev/null | head -n1; }
slurm_resumed=0
state=
for _ in $(seq 1 120); do
    state=$(slurm_node_state)
    [[ $state =~ ^(idle|mix|alloc)$ ]] && break
    if [[ $state == down* || $state == drain* ]] && [[ $slurm_resumed == 0 ]]; then
        # After a reboot or a crash the controller may remember the node as down.
        if scontrol update nodename="$SLURM_NODE" state=resume >/dev/null 2>&1; then
            slurm_resumed=1
            say "slurm: node $SLURM_NODE was $state; resumed it"
        fi
    fi
    sleep 0.5
done
if [[ ! $state =~ ^(idle|mix|alloc)$ ]]; then
    say "slurm: node $SLURM_NODE is '${state:-unknown}' after 60 s, not idle; last log lines:" >&2
    tail -n 10 "$SLURM_DIR/log/slurmctld.log" "$SLURM_DIR/log/slurmd.log" \
        "$SLURM_DIR/log/slurmctld.out" "$SLURM_DIR/log/slurmd.out" >&2 || true
    exit 1
fi
say "slurm: node $SLURM_NODE $state in partition debug ($(sinfo --version))"

# --- BuildKit that exports a registry cache: Debian trixie's dockerd, containerd, buildx ---
# Debian 12's dockerd (20.10) has no --cache-to and its docker client no buildx; trixie's
# docker.io 26.1, containerd 1.7 and docker-buildx 0.13 can export and import a build cache
# per stage (buildx's docker driver on the containerd image store). The registry-cache tests
# run them as a daemon of their own (testbed/private_docker.py), so they are unpacked into
# $BUILDKIT_ROOT, not installed: the shared dockerd and docker client stay as they are. Their
# programs need only bookworm's libraries (glibc 2.34 symbols, libsystemd, libcap, ...).
BUILDKIT_ROOT=${IMAGEBUILD_BUILDKIT_ROOT:-/opt/imagebuild-buildkit}
BUILDKIT_SUITE=trixie
BUILDKIT_PACKAGES=(docker.io containerd docker-buildx)
if [[ -x $BUILDKIT_ROOT/usr/sbin/dockerd && -x $BUILDKIT_ROOT/usr/bin/containerd \
        && -x $BUILDKIT_ROOT/usr/libexec/docker/cli-plugins/docker-buildx ]]; then
    say "buildkit: $(paste -sd',' "$BUILDKIT_ROOT/VERSIONS" 2>/dev/null | sed 's/,/, /g') in $BUILDKIT_ROOT"
elif [[ ${IMAGEBUILD_SKIP_APT:-0} == 1 ]]; then
    say "IMAGEBUILD_SKIP_APT=1 but $BUILDKIT_ROOT lacks dockerd, containerd or buildx" >&2
    exit 2
else
    # A private apt state that knows the one suite: the machine's sources stay bookworm.
    apt_dir=$(mktemp -d)
    mkdir -p "$apt_dir/lists/partial" "$apt_dir/archives/partial" "$apt_dir/parts" \
        "$apt_dir/preferences.d" "$apt_dir/debs"
    mirror=$(awk '/^(URIs:|deb )/ { for (i = 1; i <= NF; i++) if ($i ~ /^https?:\/\/.*\/debian\/?$/) { print $i; exit } }' \
        /etc/apt/sources.list.d/*.sources /etc/apt/sources.list 2>/dev/null || true)
    mirror=${mirror:-http://deb.debian.org/debian}
    printf 'deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] %s %s main\n' \
        "${mirror%/}" "$BUILDKIT_SUITE" >"$apt_dir/sources.list"
    apt_opts=(-o APT::Sandbox::User=root -o "Dir::State::Lists=$apt_dir/lists" -o "Dir::Cache::Archives=$apt_dir/archives"
              -o "Dir::Cache::pkgcache=" -o "Dir::Cache::srcpkgcache="
              -o "Dir::Etc::SourceList=$apt_dir/sources.list" -o "Dir::Etc::SourceParts=$apt_dir/parts"
              -o "Dir::Etc::Preferences=$apt_dir/preferences" -o "Dir::Etc::PreferencesParts=$apt_dir/preferences.d")
    say "buildkit: fetching ${BUILDKIT_PACKAGES[*]} from $mirror $BUILDKIT_SUITE"
    apt-get "${apt_opts[@]}" -qq update
    (cd "$apt_dir/debs" && apt-get "${apt_opts[@]}" -qq download "${BUILDKIT_PACKAGES[@]}")
    rm -rf "$BUILDKIT_ROOT.partial"
    mkdir -p "$BUILDKIT_ROOT.partial"
    for deb in "$apt_dir"/debs/*.deb; do
        dpkg-deb -x "$deb" "$BUILDKIT_ROOT.partial"
        # shellcheck disable=SC2016 # dpkg's own ${...} fields, not the shell's
        dpkg-deb --show --showformat='${Package} ${Version}\n' "$deb" \
            >>"$BUILDKIT_ROOT.partial/VERSIONS"
    done
    rm -rf "$apt_dir" "$BUILDKIT_ROOT"
    mv "$BUILDKIT_ROOT.partial" "$BUILDKIT_ROOT"
    say "buildkit: unpacked $(paste -sd',' "$BUILDKIT_ROOT/VERSIONS" | sed 's/,/, /g') into $BUILDKIT_ROOT"
fi

# --- enroot: the runtime under CSCS's Container Engine ----------------------------------
# The tests build enroot from its source (../shared/fixtures/sources/enroot.bundle) with
# Debian's makeself, musl-tools and linux-libc-dev in place of its git submodules, then run
# the squashfs files the end-to-end tests make through it, as root and as the unprivileged
# user below (enroot's unprivileged mode needs user namespaces, which the kernel allows
# unless kernel.unprivileged_userns_clone=0).
ENROOT_PACKAGES=(
    build-essential musl-tools makeself linux-libc-dev   # building enroot
    squashfs-tools procps passwd util-linux              # unsquashfs; enroot's hooks; setpriv
)
enroot_missing=()
for pkg in "${ENROOT_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' \
        || enroot_missing+=("$pkg")
done
if [[ ${#enroot_missing[@]} -eq 0 ]]; then
    say "enroot build packages already installed"
elif [[ ${IMAGEBUILD_SKIP_APT:-0} == 1 ]]; then
    say "IMAGEBUILD_SKIP_APT=1 but missing: ${enroot_missing[*]}" >&2
    exit 2
else
    say "installing: ${enroot_missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${enroot_missing[@]}" >/dev/null
    say "installed: ${enroot_missing[*]}"
fi
ENROOT_TEST_USER=${IMAGEBUILD_ENROOT_USER:-imagebuild-enroot}
if id -u "$ENROOT_TEST_USER" >/dev/null 2>&1; then
    say "enroot: unprivileged test user $ENROOT_TEST_USER exists"
else
    useradd --create-home --shell /bin/bash --comment "imagebuild tests, enroot unprivileged" \
        "$ENROOT_TEST_USER"
    say "enroot: created unprivileged test user $ENROOT_TEST_USER"
fi
# Rootless podman (the squash tests read its storage as that user) needs subordinate IDs;
# Debian's useradd allots them (login.defs SUB_UID_*), other setups may not.
if ! grep -q "^$ENROOT_TEST_USER:" /etc/subuid 2>/dev/null \
        || ! grep -q "^$ENROOT_TEST_USER:" /etc/subgid 2>/dev/null; then
    usermod --add-subuids 200000-265535 --add-subgids 200000-265535 "$ENROOT_TEST_USER"
    say "rootless podman: subordinate IDs 200000-265535 for $ENROOT_TEST_USER"
fi

say "done in $(( $(date +%s) - started )) s"
