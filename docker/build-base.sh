#!/usr/bin/env bash
# Build a minimal Debian bookworm base image without Docker Hub: debootstrap (variant minbase)
# into a temporary folder, then `docker import` it. Skips when the tag already exists.
#
# Usage: docker/build-base.sh [TAG] [SUITE]  (default sagemaker-emulator-base:bookworm bookworm;
#        bullseye for the Python 3.9 framework images, trixie for 3.13)
# Env:   DEBIAN_MIRROR  apt mirror for debootstrap (default: the first deb.debian.org-style
#                       URI in this machine's apt sources, else http://deb.debian.org/debian)
#        FORCE=1        rebuild even if the tag exists
# Needs: root, debootstrap, a running docker engine.
set -euo pipefail

TAG="${1:-sagemaker-emulator-base:bookworm}"
SUITE="${2:-bookworm}"

if [[ "${FORCE:-0}" != 1 ]] && docker image inspect "$TAG" >/dev/null 2>&1; then
    echo "build-base: $TAG exists, skipping (FORCE=1 to rebuild)"
    exit 0
fi

if [[ -z "${DEBIAN_MIRROR:-}" ]]; then
    DEBIAN_MIRROR="$(grep -hsE '^(URIs:|deb )' /etc/apt/sources.list /etc/apt/sources.list.d/* \
        | grep -oE 'https?://[^ ]*/debian/?$' | head -n1 || true)"
    DEBIAN_MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
fi

command -v debootstrap >/dev/null || { echo "build-base: debootstrap missing (apt-get install -y debootstrap)" >&2; exit 1; }
[[ "$(id -u)" == 0 ]] || { echo "build-base: debootstrap needs root" >&2; exit 1; }

ROOTFS="$(mktemp -d /tmp/sm-emulator-rootfs.XXXXXX)"
trap 'rm -rf "$ROOTFS"' EXIT
start=$SECONDS
echo "build-base: debootstrap $SUITE from $DEBIAN_MIRROR into $ROOTFS"
debootstrap --variant=minbase --include=ca-certificates "$SUITE" "$ROOTFS" "$DEBIAN_MIRROR"

# The image's own apt sources: the same mirror, plus security updates.
cat >"$ROOTFS/etc/apt/sources.list" <<SRC
deb $DEBIAN_MIRROR $SUITE main
deb $DEBIAN_MIRROR $SUITE-updates main
deb ${DEBIAN_MIRROR%/debian*}/debian-security $SUITE-security main
SRC
# Keep it small: no caches, docs or man pages in later layers either.
cat >"$ROOTFS/etc/dpkg/dpkg.cfg.d/01-sm-emulator-nodoc" <<'CFG'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
CFG
echo 'APT::Install-Recommends "false"; APT::Install-Suggests "false";' \
    >"$ROOTFS/etc/apt/apt.conf.d/01-sm-emulator-norecommends"
rm -rf "$ROOTFS"/var/cache/apt/archives/*.deb "$ROOTFS"/var/lib/apt/lists/* \
       "$ROOTFS"/usr/share/doc/* "$ROOTFS"/usr/share/man/* "$ROOTFS"/usr/share/locale/*

tar -C "$ROOTFS" --numeric-owner -c . | docker import \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'CMD ["bash"]' - "$TAG"
echo "build-base: built $TAG in $((SECONDS - start))s, size $(docker image inspect -f '{{.Size}}' "$TAG" | awk '{printf "%.0f MB", $1/1e6}')"
