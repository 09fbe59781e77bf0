#!/usr/bin/env bash
# Remove what installers/linux/install.sh installed: the service, the virtual environment, the
# worker's state and its system user. It revokes nothing: it prints how to revoke the worker.
# A copy lives in the install's prefix, so this works without the checkout. Safe to run twice.
set -euo pipefail

UNIT=deskfleet-worker.service

usage() {
  cat <<'EOF'
usage: uninstall.sh [--prefix DIR] [--desktop|--headless] [--destdir DIR] [--keep-state]

  --prefix DIR    the install to remove (default: the one this copy belongs to, else the
                  default prefix of the mode)
  --destdir DIR   remove a staged install from under DIR (also DESTDIR=DIR); no systemctl
  --keep-state    keep the worker's state folder (its identity and credential)
EOF
}

say() { printf 'deskfleet uninstall: %s\n' "$*"; }
die() {
  printf 'deskfleet uninstall: %s\n' "$*" >&2
  exit 1
}

prefix="" mode="" destdir=${DESTDIR:-} keep_state=0
while [ $# -gt 0 ]; do
  case "$1" in
    --prefix) prefix=$2; shift 2 ;;
    --desktop) mode=desktop; shift ;;
    --headless) mode=headless; shift ;;
    --destdir) destdir=$2; shift 2 ;;
    --keep-state) keep_state=1; shift ;;
    -h | --help) usage; exit 0 ;;
    *) usage >&2; die "unknown option: $1" ;;
  esac
done
if [ -n "$destdir" ]; then
  [ -d "$destdir" ] || die "--destdir $destdir does not exist"
  destdir=$(cd "$destdir" && pwd)
fi
root=$destdir
staging=0
[ -n "$root" ] && staging=1

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
if [ -z "$prefix" ]; then
  if [ -f "$here/install.conf" ]; then
    prefix=${here#"$root"}
  elif [ "$mode" = desktop ] || { [ -z "$mode" ] && [ "$(id -u)" -ne 0 ]; }; then
    prefix=${XDG_DATA_HOME:-$HOME/.local/share}/deskfleet
  else
    prefix=/opt/deskfleet
  fi
fi
manifest=$root$prefix/install.conf
if [ ! -f "$manifest" ]; then
  say "no deskfleet install at $root$prefix (no install.conf): nothing to remove"
  exit 0
fi
get() { sed -n "s/^$1=//p" "$manifest" | tail -n 1; }
mode=$(get mode)
state_dir=$(get state_dir)
unit_file=$(get unit)
autostart=$(get autostart)
sysusers=$(get sysusers)
service_user=$(get service_user)
user_created=$(get user_created)
if [ -z "$unit_file" ] || [ -z "$state_dir" ]; then
  die "$manifest is incomplete; remove by hand"
fi
if [ "$mode" = headless ] && [ "$staging" = 0 ] && [ "$(id -u)" -ne 0 ]; then
  die "the headless install is a system service: run this as root (or with sudo)"
fi

case "$state_dir" in
  /*/*) ;;
  *) die "$manifest names the state folder '$state_dir'; remove by hand" ;;
esac

# Who this worker is, read before its state goes, to say how to revoke it.
worker_id="" worker_name="" coordinators=""
if [ -f "$root$state_dir/worker.json" ]; then
  python=$root$prefix/venv/bin/python
  [ -x "$python" ] || python=python3
  { read -r worker_id && read -r worker_name && read -r coordinators; } < <(
    "$python" - "$root$state_dir/worker.json" 2>/dev/null <<'PY' || true
import json
import sys

doc = json.load(open(sys.argv[1]))
print(doc["worker_id"], doc.get("name", ""), ",".join(doc.get("coordinators", [])), sep="\n")
PY
  ) || true
fi

# Stop and disable the service (only on the live system).
if [ "$staging" = 0 ]; then
  if [ "$mode" = headless ] && [ -d /run/systemd/system ]; then
    systemctl disable --now "$UNIT" 2>/dev/null || true
  elif [ "$mode" = desktop ] && systemctl --user show-environment >/dev/null 2>&1; then
    systemctl --user disable --now "$UNIT" 2>/dev/null || true
  fi
fi
# `systemctl enable` links; without a running systemd they may be left: remove ours.
unit_dir=$(dirname "$root$unit_file")
for link in "$unit_dir"/*.wants/"$UNIT"; do
  if [ -L "$link" ]; then
    rm -f "$link"
    rmdir "$(dirname "$link")" 2>/dev/null || true
  fi
done
rm -f "$root$unit_file"
[ -n "$autostart" ] && rm -f "$root$autostart"
[ -n "$sysusers" ] && rm -f "$root$sysusers"
if [ "$staging" = 0 ]; then
  if [ "$mode" = headless ] && [ -d /run/systemd/system ]; then
    systemctl daemon-reload || true
  elif [ "$mode" = desktop ] && systemctl --user show-environment >/dev/null 2>&1; then
    systemctl --user daemon-reload || true
  fi
fi

if [ "$keep_state" = 1 ]; then
  say "kept the worker's state in $state_dir (--keep-state)"
else
  rm -rf "$root$state_dir"
fi
if [ "$staging" = 0 ] && [ "$user_created" = yes ] && [ -n "$service_user" ] &&
  id -u "$service_user" >/dev/null 2>&1; then
  userdel "$service_user" || say "could not remove the user $service_user; remove it by hand"
fi
rm -rf "$root$prefix"

if [ "$staging" = 1 ]; then
  # A staging root holds nothing else of ours: drop the folders the install created.
  find "$root" -mindepth 1 -depth -type d -empty -delete
fi
say "removed the deskfleet worker installed at $prefix"

if [ -n "$worker_id" ]; then
  say "nothing was revoked: worker $worker_id ($worker_name) stays enrolled at $coordinators"
  say "until an admin revokes it: deskfleet workers revoke $worker_id --coordinator ${coordinators%%,*}"
else
  say "no enrollment was found, so there is no worker to revoke"
fi
