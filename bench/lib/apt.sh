# Shared by every bench script (sourced, not run): installs Debian packages, as root or through sudo.
# shellcheck shell=bash
#
# apt_install PACKAGE... installs the packages, refreshing the package lists
# only when one of them is unknown to apt. It uses the caller's `say` and
# `die`. Nothing happens when no package is given.

apt_install() {
    (($# == 0)) && return
    command -v apt-get >/dev/null || die "missing $*; install them (no apt-get here)"
    local sudo=()
    if ((EUID != 0)); then
        command -v sudo >/dev/null || die "missing $*; run as root or install sudo"
        sudo=(sudo)
    fi
    local package
    for package in "$@"; do
        if ! apt-cache policy "$package" 2>/dev/null | grep -q 'Candidate: [^(]'; then
            say "updating the package lists (apt-get update)"
            "${sudo[@]}" apt-get update -qq
            break
        fi
    done
    say "installing $*"
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive \
        apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}
