#!/usr/bin/env bash
# Install a deskfleet worker on Linux, enroll it and run it under systemd, in one step.
# See docs/INSTALL-linux.md. Running it again upgrades in place and keeps the enrollment.
set -euo pipefail
umask 022

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=installers/lib/venv.sh
. "$HERE/../lib/venv.sh"

UNIT=deskfleet-worker.service

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
  --headless           a research node: a hardened system service under its own user
                       (needs root); the default when no DISPLAY or WAYLAND_DISPLAY is set
  --desktop            the signed-in user's desktop: a systemd user service started in the
                       graphical session, with its display (run it as that user, not root)
  --prefix DIR         where the virtual environment goes
                       (default /opt/deskfleet; desktop: ~/.local/share/deskfleet)
  --state-dir DIR      the worker's identity and credential
                       (default /var/lib/deskfleet; desktop: ~/.local/state/deskfleet)
  --name NAME          the worker's name (default: the hostname)
  --label KEY=VALUE    a routing label (repeatable)
  --chromium PATH      the Chromium executable (default /usr/bin/chromium)
  --wheel FILE         install this wheel instead of the project this script belongs to
  --wheelhouse DIR     install offline from wheels in DIR (pip --no-index --find-links DIR)
  --python PATH        the Python (3.11+) that creates the environment (default python3)
  --deps-from VENV     reuse the dependencies of another virtual environment instead of
                       downloading them (tests, machines that already hold them)
  --destdir DIR        stage every file under DIR (also DESTDIR=DIR) for packaging: no
                       enrollment, no user, no systemctl, nothing written outside DIR
  --dry-run            the same, into a new temporary DIR that is printed at the end
  --no-start           install and enroll, but do not enable or start the service
  --skip-doctor        do not run `deskfleet-worker doctor` at the end
EOF
}

coordinator="" token="" token_file="" ca_file="" plaintext=0 mode="" prefix="" state_dir="" name=""
chromium=""
wheel="" wheelhouse="" python="" deps_from="" destdir=${DESTDIR:-} dry_run=0 start=1 doctor=1
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

if [ -z "$mode" ]; then
  if [ -n "${DISPLAY:-}${WAYLAND_DISPLAY:-}" ]; then mode=desktop; else mode=headless; fi
  df_say "mode: $mode (pass --desktop or --headless to choose)"
fi

config_home=${XDG_CONFIG_HOME:-$HOME/.config}
autostart="" sysusers="" service_user=""
if [ "$mode" = headless ]; then
  prefix=${prefix:-/opt/deskfleet}
  state_dir=${state_dir:-/var/lib/deskfleet}
  unit_file=/etc/systemd/system/$UNIT
  sysusers=/etc/sysusers.d/deskfleet.conf
  service_user=deskfleet
  if [ "$staging" = 0 ] && [ "$(id -u)" -ne 0 ]; then
    df_die "--headless installs a system service: run it as root (or with sudo)"
  fi
else
  prefix=${prefix:-${XDG_DATA_HOME:-$HOME/.local/share}/deskfleet}
  state_dir=${state_dir:-${XDG_STATE_HOME:-$HOME/.local/state}/deskfleet}
  unit_file=$config_home/systemd/user/$UNIT
  autostart=$config_home/autostart/deskfleet-worker.desktop
  if [ "$staging" = 0 ] && [ "$(id -u)" -eq 0 ]; then
    df_warn "--desktop as root installs the worker for root's own graphical session;" \
      "to control your desktop, run this as yourself, without sudo"
  fi
fi
case "$state_dir" in /*) ;; *) df_die "--state-dir $state_dir: give an absolute path" ;; esac

root=$destdir # every path below is written at $root$path
venv=$prefix/venv
manifest=$root$prefix/install.conf
df_check_prefix "$prefix" "$root$prefix"

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
if [ -n "$wheel" ]; then
  df_pip_install "$root$venv" "$wheel" "$deps_from" "$wheelhouse"
else
  src=$(mktemp -d "${TMPDIR:-/tmp}/deskfleet-src.XXXXXX")
  trap 'rm -rf "$src"' EXIT
  df_stage_source "$(df_project_root)" "$src"
  df_pip_install "$root$venv" "$src" "$deps_from" "$wheelhouse"
fi
df_relocate_venv "$root$venv" "$root$venv" "$venv"
# The uninstaller travels with the install, so removing it needs no checkout.
install -m 0755 "$HERE/uninstall.sh" "$root$prefix/uninstall.sh"

# --- the service -------------------------------------------------------------------------------
# An ExecStart argument: quoted, with systemd's specifiers (%) and variables ($) escaped.
unit_arg() {
  local s=$1
  s=${s//\\/\\\\}
  s=${s//\"/\\\"}
  s=${s//%/%%}
  s=${s//\$/\$\$}
  printf '"%s"' "$s"
}
exec_start="$(unit_arg "$venv/bin/deskfleet-worker") run --state-dir $(unit_arg "$state_dir")"
[ -n "$chromium" ] && exec_start+=" --chromium $(unit_arg "$chromium")"

if [ "$mode" = headless ]; then
  exec_start+=" --no-computer-use"
  case "$state_dir" in
    # systemd creates it (and gives it to the service's user) when it is under /var/lib.
    /var/lib/?*) state_lines="StateDirectory=${state_dir#/var/lib/}"$'\n'"StateDirectoryMode=0700" ;;
    *) state_lines="ReadWritePaths=$(unit_arg "$state_dir")" ;;
  esac
  df_write "$root$sysusers" 0644 <<EOF
# The deskfleet worker's own user (installers/linux/install.sh); systemd-sysusers reads this.
u $service_user - "deskfleet worker" $state_dir /usr/sbin/nologin
EOF
  df_write "$root$unit_file" 0644 <<EOF
# deskfleet headless worker: browser research, no desktop control.
# Written by installers/linux/install.sh; removed by $prefix/uninstall.sh.
[Unit]
Description=deskfleet worker (headless research node)
After=network-online.target
Wants=network-online.target

[Service]
Type=simple
User=$service_user
Group=$service_user
ExecStart=$exec_start
# Exit 3: the coordinator refused the credential (revoked); restarting cannot help.
Restart=on-failure
RestartSec=5
RestartPreventExitStatus=3
Environment=PYTHONUNBUFFERED=1
# Chromium writes its profile and cache under HOME and the XDG folders: keep them in the state.
Environment=$(unit_arg "HOME=$state_dir") $(unit_arg "XDG_CONFIG_HOME=$state_dir/.config") $(unit_arg "XDG_CACHE_HOME=$state_dir/.cache")
$state_lines
UMask=0077
# Hardening: the worker needs the network, its state folder, and nothing else of the system.
NoNewPrivileges=yes
ProtectSystem=strict
ProtectHome=yes
PrivateTmp=yes
PrivateDevices=yes
ProtectKernelTunables=yes
ProtectKernelModules=yes
ProtectKernelLogs=yes
ProtectControlGroups=yes
ProtectClock=yes
ProtectHostname=yes
ProtectProc=invisible
RestrictSUIDSGID=yes
RestrictRealtime=yes
RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6 AF_NETLINK
LockPersonality=yes
SystemCallArchitectures=native
CapabilityBoundingSet=
AmbientCapabilities=
# Not MemoryDenyWriteExecute: Chromium's JavaScript compiler needs writable code pages.

[Install]
WantedBy=multi-user.target
EOF
else
  session_start=$prefix/bin/deskfleet-session-start
  df_write "$root$session_start" 0755 <<'EOF'
#!/bin/sh
# Run at graphical login (XDG autostart): hand this session's display to the systemd user
# manager, then restart the worker so that it runs on this display, not a stale one.
vars=""
for v in DISPLAY WAYLAND_DISPLAY XAUTHORITY; do
  eval "value=\${$v:-}"
  [ -n "$value" ] && vars="$vars $v"
done
if [ -z "$vars" ]; then
  echo "deskfleet-session-start: no DISPLAY or WAYLAND_DISPLAY in this session" >&2
  exit 1
fi
# shellcheck disable=SC2086 # the names are split on purpose
systemctl --user import-environment $vars
exec systemctl --user restart deskfleet-worker.service
EOF
  df_write "$root$unit_file" 0644 <<EOF
# deskfleet desktop worker: Computer Use of this session's display, and browser research.
# Written by installers/linux/install.sh; removed by $prefix/uninstall.sh.
[Unit]
Description=deskfleet worker (desktop session)
PartOf=graphical-session.target
After=graphical-session.target
# Only with a display to control. At login, $session_start (an XDG autostart
# entry) imports DISPLAY, WAYLAND_DISPLAY and XAUTHORITY into the user manager and starts it.
ConditionEnvironment=|DISPLAY
ConditionEnvironment=|WAYLAND_DISPLAY

[Service]
Type=simple
ExecStart=$exec_start
# Exit 3: the coordinator refused the credential (revoked); restarting cannot help.
Restart=on-failure
RestartSec=5
RestartPreventExitStatus=3
Environment=PYTHONUNBUFFERED=1
UMask=0077
NoNewPrivileges=yes
# No PrivateTmp: the X server's socket lives in /tmp/.X11-unix.

[Install]
WantedBy=graphical-session.target
EOF
  df_write "$root$autostart" 0644 <<EOF
[Desktop Entry]
Type=Application
Name=deskfleet worker
Comment=Starts the deskfleet worker on this session's display
Exec=$session_start
NoDisplay=true
X-GNOME-Autostart-enabled=true
EOF
fi

# --- the service user and the state folder -----------------------------------------------------
user_created=$(df_manifest_get "$manifest" user_created)
if [ "$mode" = headless ] && [ "$staging" = 0 ] && ! id -u "$service_user" >/dev/null 2>&1; then
  if command -v systemd-sysusers >/dev/null 2>&1; then
    systemd-sysusers "$sysusers"
  else
    useradd --system --user-group --home-dir "$state_dir" --no-create-home \
      --shell /usr/sbin/nologin --comment "deskfleet worker" "$service_user"
  fi
  user_created=yes
  df_say "created the system user $service_user"
fi
mkdir -p "$root$state_dir"
chmod 0700 "$root$state_dir"

# Written before enrolling: an enrollment that fails (a wrong token, a missing --ca-file)
# can be retried with the same command, which would refuse a prefix without it.
df_write "$manifest" 0644 <<EOF
# What installers/linux/install.sh put on this machine; $prefix/uninstall.sh reads it.
mode=$mode
prefix=$prefix
state_dir=$state_dir
unit=$unit_file
autostart=$autostart
sysusers=$sysusers
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
  chown -R "$service_user:$service_user" "$state_dir"
fi

# --- start it ----------------------------------------------------------------------------------
if [ "$staging" = 1 ]; then
  df_say "staged under $root (not enabled or started; doctor not run)"
  exit 0
fi
run_by_hand="$venv/bin/deskfleet-worker run --state-dir $state_dir"
if [ "$start" = 0 ]; then
  df_say "installed; not started (--no-start)"
elif [ "$mode" = headless ]; then
  if [ -d /run/systemd/system ]; then
    systemctl daemon-reload
    systemctl enable "$UNIT"
    systemctl restart "$UNIT"
    df_say "started $UNIT (systemctl status $UNIT; journalctl -u $UNIT)"
  else
    df_warn "systemd is not running here: $UNIT is installed but not started." \
      "Start the worker by hand: runuser -u $service_user -- $run_by_hand --no-computer-use"
  fi
else
  if systemctl --user show-environment >/dev/null 2>&1; then
    systemctl --user daemon-reload
    systemctl --user enable "$UNIT"
    if [ -n "${DISPLAY:-}${WAYLAND_DISPLAY:-}" ]; then
      "$session_start"
      df_say "started $UNIT on ${DISPLAY:-$WAYLAND_DISPLAY} (systemctl --user status $UNIT)"
    else
      df_say "enabled $UNIT: it starts at your next graphical login"
    fi
  else
    df_warn "no systemd user manager answers here: $UNIT starts at your next graphical" \
      "login. Start the worker now by hand: $run_by_hand"
  fi
fi

if [ "$doctor" = 1 ]; then
  df_say "checking the worker (deskfleet-worker doctor)"
  check=("$worker_bin" doctor --state-dir "$state_dir")
  [ -n "$chromium" ] && check+=(--chromium "$chromium")
  if [ "$mode" = headless ]; then
    check+=(--no-computer-use)
    # As the service's user, with the service's folders, so it sees what the service will.
    check=(env HOME="$state_dir" XDG_CONFIG_HOME="$state_dir/.config"
      XDG_CACHE_HOME="$state_dir/.cache" "${check[@]}")
    command -v runuser >/dev/null 2>&1 && check=(runuser -u "$service_user" -- "${check[@]}")
  fi
  if ! "${check[@]}"; then
    df_warn "the worker is installed, but doctor found problems (the FIX column says what to do)"
  fi
fi
df_say "done. Uninstall with: $prefix/uninstall.sh"
