#!/bin/bash
# Remove what installers/macos/install.sh installed: the launchd job, the virtual environment,
# the worker's state and logs, and the daemon's user if the install created it. It revokes
# nothing: it prints how to revoke the worker. Safe to run twice. Written for bash 3.2.
set -euo pipefail

LABEL=com.deskfleet.worker

usage() {
  cat <<'EOF'
usage: uninstall.sh [--prefix DIR] [--desktop|--headless] [--destdir DIR] [--keep-state]

  --prefix DIR    the install to remove (default: the one this copy belongs to, else the
                  default prefix of the mode)
  --destdir DIR   remove a staged install from under DIR (also DESTDIR=DIR); no launchctl
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
  elif [ "$mode" = headless ] || { [ -z "$mode" ] && [ "$(id -u)" -eq 0 ]; }; then
    prefix=/usr/local/deskfleet
  else
    prefix=$HOME/Library/deskfleet
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
plist=$(get plist)
log_dir=$(get log_dir)
service_user=$(get service_user)
user_created=$(get user_created)
case "$state_dir" in
  /*/*) ;;
  *) die "$manifest names the state folder '$state_dir'; remove by hand" ;;
esac
[ -n "$plist" ] || die "$manifest is incomplete; remove by hand"
if [ "$mode" = headless ] && [ "$staging" = 0 ] && [ "$(id -u)" -ne 0 ]; then
  die "the headless install is a LaunchDaemon: run this with sudo"
fi

# Who this worker is, read before its state goes, to say how to revoke it.
worker_id="" worker_name="" coordinators=""
if [ -f "$root$state_dir/worker.json" ]; then
  python=$root$prefix/venv/bin/python
  [ -x "$python" ] || python=python3
  info=$("$python" - "$root$state_dir/worker.json" 2>/dev/null <<'PY' || true
import json
import sys

doc = json.load(open(sys.argv[1]))
print(doc["worker_id"], doc.get("name", ""), ",".join(doc.get("coordinators", [])), sep="\n")
PY
  )
  worker_id=$(printf '%s\n' "$info" | sed -n 1p)
  worker_name=$(printf '%s\n' "$info" | sed -n 2p)
  coordinators=$(printf '%s\n' "$info" | sed -n 3p)
fi

if [ "$staging" = 0 ]; then
  if [ "$mode" = headless ]; then domain=system; else domain=gui/$(id -u); fi
  launchctl bootout "$domain/$LABEL" 2>/dev/null || true
fi
rm -f "$root$plist"
[ -n "$log_dir" ] && rm -rf "$root$log_dir"
if [ "$keep_state" = 1 ]; then
  say "kept the worker's state in $state_dir (--keep-state)"
else
  rm -rf "$root$state_dir"
fi
if [ "$staging" = 0 ] && [ "$user_created" = yes ] && [ -n "$service_user" ]; then
  dscl . -delete "/Users/$service_user" 2>/dev/null || say "could not remove the user $service_user"
  dscl . -delete "/Groups/$service_user" 2>/dev/null || true
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
