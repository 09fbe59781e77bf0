#!/bin/bash
# Install a deskfleet worker on macOS, enroll it and run it under launchd, in one step.
# See docs/INSTALL-macos.md. Written for macOS's bash 3.2. Running it again upgrades in place
# and keeps the enrollment.
set -euo pipefail
umask 022

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=installers/lib/venv.sh
. "$HERE/../lib/venv.sh"

LABEL=com.deskfleet.worker

usage() {
  cat <<'EOF'
usage: install.sh --coordinator HOST:PORT --token dfe_... [--desktop|--headless] [options]

  --coordinator ADDR   the coordinator(s), HOST:PORT[,HOST:PORT...]
  --token TOKEN        an enrollment token (deskfleet tokens create); or --token-file FILE
  --ca-file FILE       the coordinator's CA certificate (ca.pem, handed out with the token):
                       enroll over TLS, with a client certificate for mutual TLS; enroll
                       keeps a copy in the state folder (also DESKFLEET_CA_FILE)
  --plaintext          enroll and run in plaintext with a coordinator beyond this machine
                       (credentials cross the network unencrypted); loopback needs neither
  --desktop            a LaunchAgent in your GUI session: Computer Use and browser research
                       (run it as yourself, not with sudo); the default
  --headless           a LaunchDaemon at boot under its own user: browser research only
                       (run it with sudo)
  --user NAME          the headless daemon's account (default _deskfleet, created if missing)
  --prefix DIR         where the virtual environment goes
                       (default ~/Library/deskfleet; headless: /usr/local/deskfleet)
  --state-dir DIR      the worker's identity and credential (default ~/Library/Application
                       Support/deskfleet; headless: /Library/Application Support/deskfleet)
  --name NAME          the worker's name (default: the hostname)
  --label KEY=VALUE    a routing label (repeatable)
  --chromium PATH      the browser executable (default: Chromium or Google Chrome in
                       /Applications, when present)
  --wheel FILE         install this wheel instead of the project this script belongs to
  --wheelhouse DIR     install offline from wheels in DIR
  --python PATH        the Python (3.11+) that creates the environment (default python3)
  --deps-from VENV     reuse the dependencies of another virtual environment
  --destdir DIR        stage every file under DIR (also DESTDIR=DIR): no enrollment, no user,
                       no launchctl, nothing written outside DIR
  --dry-run            the same, into a new temporary DIR that is printed at the end
  --no-start           install and enroll, but do not load the job
  --skip-doctor        do not run `deskfleet-worker doctor` at the end
EOF
}

coordinator="" token="" token_file="" ca_file="" plaintext=0 mode=desktop prefix="" state_dir=""
name="" chromium=""
wheel="" wheelhouse="" python="" deps_from="" destdir=${DESTDIR:-} dry_run=0 start=1 doctor=1
service_user=_deskfleet
labels=()
while [ $# -gt 0 ]; do
  case "$1" in
    --coordinator) coordinator=$2; shift 2 ;;
    --token) token=$2; shift 2 ;;
    --token-file) token_file=$2; shift 2 ;;
    --ca-file) ca_file=$2; shift 2 ;;
    --plaintext) plaintext=1; shift ;;
    --desktop) mode=desktop; shift ;;
    --headless) mode=headless; shift ;;
    --user) service_user=$2; shift 2 ;;
    --prefix) prefix=$2; shift 2 ;;
    --state-dir) state_dir=$2; shift 2 ;;
    --name) name=$2; shift 2 ;;
    --label) labels+=(--label "$2"); shift 2 ;;
    --chromium) chromium=$2; shift 2 ;;
    --wheel) wheel=$2; shift 2 ;;
    --wheelhouse) wheelhouse=$2; shift 2 ;;
    --python) python=$2; shift 2 ;;
    --deps-from) deps_from=$2; shift 2 ;;
    --destdir) destdir=$2; shift 2 ;;
    --dry-run) dry_run=1; shift ;;
    --no-start) start=0; shift ;;
    --skip-doctor) doctor=0; shift ;;
    -h | --help) usage; exit 0 ;;
    *) usage >&2; df_die "unknown option: $1" ;;
  esac
done

if [ "$dry_run" = 1 ] && [ -z "$destdir" ]; then
  destdir=$(mktemp -d "${TMPDIR:-/tmp}/deskfleet-dry-run.XXXXXX")
fi
if [ -n "$destdir" ]; then
  mkdir -p "$destdir"
  destdir=$(cd "$destdir" && pwd)
fi
staging=0
[ -n "$destdir" ] && staging=1
if [ "$staging" = 0 ] && [ "$(uname -s)" != Darwin ]; then
  df_die "this installer is for macOS (on Linux: installers/linux/install.sh)"
fi

if [ "$mode" = headless ]; then
  prefix=${prefix:-/usr/local/deskfleet}
  state_dir=${state_dir:-/Library/Application Support/deskfleet}
  log_dir=/Library/Logs/deskfleet
  plist=/Library/LaunchDaemons/$LABEL.plist
  template=$HERE/$LABEL.daemon.plist
  domain=system
  if [ "$staging" = 0 ] && [ "$(id -u)" -ne 0 ]; then
    df_die "--headless installs a LaunchDaemon: run it with sudo"
  fi
else
  prefix=${prefix:-$HOME/Library/deskfleet}
  state_dir=${state_dir:-$HOME/Library/Application Support/deskfleet}
  log_dir=$HOME/Library/Logs/deskfleet
  plist=$HOME/Library/LaunchAgents/$LABEL.plist
  template=$HERE/$LABEL.agent.plist
  domain=gui/$(id -u)
  service_user=""
  if [ "$staging" = 0 ] && [ "$(id -u)" -eq 0 ]; then
    df_die "--desktop runs in your own GUI session: run it as yourself, without sudo"
  fi
fi
case "$state_dir" in /*) ;; *) df_die "--state-dir $state_dir: give an absolute path" ;; esac

root=$destdir # every path below is written at $root$path
venv=$prefix/venv
manifest=$root$prefix/install.conf
df_check_prefix "$prefix" "$root$prefix"

if [ -z "$chromium" ]; then
  for candidate in "/Applications/Chromium.app/Contents/MacOS/Chromium" \
    "/Applications/Google Chrome.app/Contents/MacOS/Google Chrome"; do
    if [ -x "$candidate" ]; then
      chromium=$candidate
      break
    fi
  done
  [ -n "$chromium" ] || df_warn "no Chromium or Google Chrome in /Applications: browser research" \
    "stays unavailable until you install one and run this again with --chromium PATH"
fi

if [ -n "$ca_file" ]; then
  [ -e "$ca_file" ] || df_die "--ca-file $ca_file: no such file (the coordinator's ca.pem)"
  { [ -f "$ca_file" ] && [ -r "$ca_file" ]; } || df_die "--ca-file $ca_file: not a readable file"
fi
if [ -n "$token_file" ]; then
  token=$(tr -d '[:space:]' <"$token_file")
fi
enrolled=0
[ -f "$root$state_dir/credential" ] && enrolled=1
if [ "$staging" = 0 ] && [ "$enrolled" = 0 ]; then
  [ -n "$coordinator" ] || df_die "--coordinator HOST:PORT is required to enroll"
  [ -n "$token" ] || df_die "--token (or --token-file) is required to enroll: deskfleet tokens create"
fi

# --- the virtual environment -------------------------------------------------------------------
if [ -n "$deps_from" ]; then
  deps_from=$(cd "$deps_from" && pwd)
  python=${python:-$deps_from/bin/python}
fi
python=${python:-python3}
df_check_python "$python"
df_relocate_venv "$root$venv" "$venv" "$root$venv" # staged before: see venv.sh
df_make_venv "$root$venv" "$python" "$deps_from"
src=""
cleanup() { if [ -n "$src" ]; then rm -rf "$src"; fi; }
trap cleanup EXIT
if [ -n "$wheel" ]; then
  df_pip_install "$root$venv" "$wheel" "$deps_from" "$wheelhouse"
else
  src=$(mktemp -d "${TMPDIR:-/tmp}/deskfleet-src.XXXXXX")
  df_stage_source "$(df_project_root)" "$src"
  df_pip_install "$root$venv" "$src" "$deps_from" "$wheelhouse"
fi
df_relocate_venv "$root$venv" "$root$venv" "$venv"
install -m 0755 "$HERE/uninstall.sh" "$root$prefix/uninstall.sh"

# --- the service user (headless) ---------------------------------------------------------------
user_created=$(df_manifest_get "$manifest" user_created)
if [ "$mode" = headless ] && [ "$staging" = 0 ] && ! dscl . -read "/Users/$service_user" >/dev/null 2>&1; then
  # A hidden role account, as macOS's own daemons have: a free id below 500, no shell, no login.
  id_=300
  while dscl . -search /Users UniqueID "$id_" | grep -q . ||
    dscl . -search /Groups PrimaryGroupID "$id_" | grep -q .; do
    id_=$((id_ + 1))
  done
  dscl . -create "/Groups/$service_user" PrimaryGroupID "$id_"
  dscl . -create "/Groups/$service_user" RealName "deskfleet worker"
  dscl . -create "/Users/$service_user" UniqueID "$id_"
  dscl . -create "/Users/$service_user" PrimaryGroupID "$id_"
  dscl . -create "/Users/$service_user" UserShell /usr/bin/false
  dscl . -create "/Users/$service_user" NFSHomeDirectory "$state_dir"
  dscl . -create "/Users/$service_user" RealName "deskfleet worker"
  dscl . -create "/Users/$service_user" IsHidden 1
  dscl . -create "/Users/$service_user" Password '*'
  user_created=yes
  df_say "created the hidden user $service_user ($id_)"
fi

# --- the launchd job ---------------------------------------------------------------------------
extra=()
[ -n "$chromium" ] && extra+=(--chromium "$chromium")
mkdir -p "$(dirname "$root$plist")"
"$root$venv/bin/python" - "$template" "$root$plist" "VENV=$venv" "STATE_DIR=$state_dir" \
  "LOG_DIR=$log_dir" "USER=$service_user" "GROUP=$service_user" -- ${extra[@]+"${extra[@]}"} <<'PY'
import os
import plistlib
import re
import sys

template, dest, *rest = sys.argv[1:]
cut = rest.index("--")
values = dict(item.split("=", 1) for item in rest[:cut])


def fill(value):
    if isinstance(value, str):
        for key, text in values.items():
            value = value.replace(f"@{key}@", text)
        return value
    if isinstance(value, list):
        return [fill(v) for v in value]
    if isinstance(value, dict):
        return {k: fill(v) for k, v in value.items()}
    return value


with open(template, "rb") as fh:
    job = fill(plistlib.load(fh))
job["ProgramArguments"] += rest[cut + 1 :]
left = re.findall(r"@[A-Z_]+@", repr(job))
if left:
    sys.exit(f"{template}: no value for {', '.join(sorted(set(left)))}")
with open(dest + ".tmp", "wb") as fh:
    plistlib.dump(job, fh)
os.chmod(dest + ".tmp", 0o644)
os.replace(dest + ".tmp", dest)
PY

# --- the state folder and the enrollment -------------------------------------------------------
mkdir -p "$root$state_dir" "$root$log_dir"
chmod 0700 "$root$state_dir"
# Written before enrolling: an enrollment that fails (a wrong token, a missing --ca-file)
# can be retried with the same command, which would refuse a prefix without it.
df_write "$manifest" 0644 <<EOF
# What installers/macos/install.sh put on this machine; $prefix/uninstall.sh reads it.
mode=$mode
prefix=$prefix
state_dir=$state_dir
plist=$plist
log_dir=$log_dir
service_user=$service_user
user_created=${user_created:-no}
EOF

worker_bin=$root$venv/bin/deskfleet-worker
if [ "$staging" = 1 ]; then
  df_say "staging only: not enrolling (a credential belongs to one machine, never to a package)"
elif [ "$enrolled" = 1 ]; then
  df_say "$state_dir already holds an enrollment; keeping it (uninstall first to enroll anew)"
  if [ -n "$ca_file" ] || [ "$plaintext" = 1 ]; then
    df_warn "--ca-file and --plaintext apply at enrollment only: the kept enrollment is unchanged"
  fi
else
  enroll=("$worker_bin" enroll --coordinator "$coordinator" --token "$token" --state-dir "$state_dir")
  [ -n "$name" ] && enroll+=(--name "$name")
  # enroll copies the CA into the state folder (and records --plaintext there): the service
  # needs neither flag.
  [ -n "$ca_file" ] && enroll+=(--ca-file "$ca_file")
  [ "$plaintext" = 1 ] && enroll+=(--plaintext)
  "${enroll[@]}" ${labels[@]+"${labels[@]}"}
fi
if [ "$mode" = headless ] && [ "$staging" = 0 ]; then
  chown -R "$service_user:$service_user" "$state_dir" "$log_dir"
fi

if [ "$staging" = 1 ]; then
  df_say "staged under $root (not loaded; doctor not run)"
  exit 0
fi
if [ "$start" = 1 ]; then
  launchctl bootout "$domain/$LABEL" 2>/dev/null || true
  launchctl bootstrap "$domain" "$plist"
  df_say "loaded $LABEL (launchctl print $domain/$LABEL; log in $log_dir/worker.log)"
else
  df_say "installed; not loaded (--no-start)"
fi
if [ "$mode" = desktop ]; then
  # macOS grants these to the real interpreter the job runs, not to the venv's symlink.
  real_python=$("$root$venv/bin/python" -c 'import os, sys; print(os.path.realpath(sys.executable))')
  df_say "Computer Use needs two permissions for $real_python:"
  df_say "System Settings > Privacy & Security > Screen Recording, and > Accessibility;"
  df_say "then: launchctl kickstart -k $domain/$LABEL. (The doctor below runs from this"
  df_say "terminal, so its display and input rows show the terminal's permissions.)"
fi

if [ "$doctor" = 1 ]; then
  df_say "checking the worker (deskfleet-worker doctor)"
  check=("$worker_bin" doctor --state-dir "$state_dir")
  [ -n "$chromium" ] && check+=(--chromium "$chromium")
  if [ "$mode" = headless ]; then
    check=(sudo -u "$service_user" env HOME="$state_dir" "${check[@]}" --no-computer-use)
  fi
  if ! "${check[@]}"; then
    df_warn "the worker is installed, but doctor found problems (the FIX column says what to do)"
  fi
fi
df_say "done. Uninstall with: $prefix/uninstall.sh"
