# shellcheck shell=bash
# Shared by installers/linux/install.sh and installers/macos/install.sh (sourced, not run).
# Creates the worker's virtual environment and installs deskfleet into it. Written for bash 3.2
# (macOS's /bin/bash): no associative arrays, and empty arrays are expanded with ${a[@]+...}.

df_say() { printf 'deskfleet install: %s\n' "$*"; }
df_warn() { printf 'deskfleet install: warning: %s\n' "$*" >&2; }
df_die() {
  printf 'deskfleet install: %s\n' "$*" >&2
  exit 1
}

# The project's root: installers/lib/ is two levels below it.
df_project_root() { (cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd); }

# df_check_python PYTHON: deskfleet needs Python 3.11 or newer.
df_check_python() {
  command -v "$1" >/dev/null 2>&1 || df_die "no Python at '$1' (pass --python PATH)"
  "$1" -c 'import sys; sys.exit(sys.version_info < (3, 11))' ||
    df_die "$1 is Python $("$1" -c 'import platform; print(platform.python_version())'); deskfleet needs 3.11 or newer"
}

# df_make_venv VENV PYTHON DEPS_FROM
# With DEPS_FROM (another virtual environment that already holds deskfleet's dependencies), the
# new environment reads that one's site-packages through a .pth file instead of downloading
# them; pip then comes from there too. Without it, a normal venv with its own pip.
df_make_venv() {
  local venv=$1 python=$2 deps=$3 site
  if [ ! -x "$venv/bin/python" ]; then
    df_say "creating the virtual environment $venv"
    if [ -n "$deps" ]; then
      "$python" -m venv --without-pip "$venv"
    else
      "$python" -m venv "$venv"
    fi
  fi
  if [ -n "$deps" ]; then
    [ -x "$deps/bin/python" ] || df_die "--deps-from $deps: not a virtual environment"
    local want have
    want=$("$deps/bin/python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
    have=$("$venv/bin/python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
    [ "$want" = "$have" ] || df_die "--deps-from $deps is Python $want, the new environment $have"
    site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
    "$deps/bin/python" -c 'import sysconfig; p = sysconfig.get_paths(); print(p["purelib"]); print(p["platlib"]) if p["platlib"] != p["purelib"] else None' \
      >"$site/deskfleet-deps.pth"
  fi
}

# df_stage_source ROOT DIR: copy what pip needs to build deskfleet into DIR, so that building
# leaves no build/ or *.egg-info in the checkout (which may be read-only, or someone's work tree).
df_stage_source() {
  local root=$1 dir=$2
  [ -f "$root/pyproject.toml" ] || df_die "$root is not the deskfleet project (no pyproject.toml); pass --wheel FILE"
  (cd "$root" && tar -cf - --exclude=__pycache__ --exclude='*.pyc' \
    pyproject.toml coordinator worker_agent shared) | (cd "$dir" && tar -xf -)
}

# df_pip_install VENV WHAT DEPS_FROM WHEELHOUSE: install WHAT (a source folder or a wheel).
df_pip_install() {
  local venv=$1 what=$2 deps=$3 wheelhouse=$4
  local args=(install --disable-pip-version-check --no-warn-script-location --quiet)
  if [ -n "$deps" ]; then
    # The dependencies are already importable; the build backend (setuptools) too.
    args+=(--no-deps --no-build-isolation)
  fi
  if [ -n "$wheelhouse" ]; then
    args+=(--no-index --find-links "$wheelhouse")
  fi
  df_say "installing deskfleet into $venv"
  "$venv/bin/python" -m pip "${args[@]}" "$what"
  "$venv/bin/deskfleet-worker" --version >/dev/null ||
    df_die "the installed deskfleet-worker does not run"
}

# df_relocate_venv VENV FROM TO: a venv staged under DESTDIR names its staging path in its
# scripts' first lines and in pyvenv.cfg; rewrite them to the final path so the tree can be
# packaged and copied to /. Staging again runs it the other way first (final path back to the
# staging path), so that pip and the scripts work in the staged tree: pip leaves a requirement
# that is already satisfied (the same wheel again) as it is, with the final path in its scripts.
df_relocate_venv() {
  local venv=$1 from=$2 to=$3
  [ "$from" = "$to" ] && return 0
  [ -x "$venv/bin/python" ] || return 0 # nothing staged yet
  "$venv/bin/python" - "$venv" "$from" "$to" <<'PY'
import pathlib
import sys

venv, old, new = pathlib.Path(sys.argv[1]), sys.argv[2].encode(), sys.argv[3].encode()
for path in [venv / "pyvenv.cfg", *(venv / "bin").iterdir()]:
    if path.is_symlink() or not path.is_file():
        continue
    data = path.read_bytes()
    if b"\0" in data[:1024]:
        continue
    if new.endswith(old):  # back to the staging path: the final path is a suffix of it
        data = data.replace(new, old)  # what already names the staging path stays as it is
    if old in data:
        path.write_bytes(data.replace(old, new))
PY
}

# df_write FILE MODE: write stdin to FILE atomically (a temporary file beside it, then a rename).
df_write() {
  local file=$1 mode=$2 tmp
  mkdir -p "$(dirname "$file")"
  tmp=$(mktemp "$(dirname "$file")/.deskfleet.XXXXXX")
  cat >"$tmp"
  chmod "$mode" "$tmp"
  mv -f "$tmp" "$file"
}

# df_manifest_get FILE KEY: one value of an install.conf (key=value lines), empty if absent.
df_manifest_get() {
  [ -f "$1" ] || return 0
  sed -n "s/^$2=//p" "$1" | tail -n 1
}

# df_check_prefix PREFIX STAGED: refuse a prefix that is a system folder, or (STAGED: where it is
# written, under DESTDIR if any) that holds anything but a previous deskfleet install, since
# uninstalling removes the prefix whole.
df_check_prefix() {
  local prefix=$1 staged=$2
  case "$prefix" in
    /* ) ;;
    *) df_die "--prefix $prefix: give an absolute path" ;;
  esac
  case "${prefix%/}" in
    "" | /usr | /usr/local | /opt | /etc | /var | /home | /Users | /Applications | /Library | "${HOME%/}")
      df_die "--prefix $prefix: choose a folder of its own, e.g. ${prefix%/}/deskfleet" ;;
  esac
  if [ -d "$staged" ] && [ -n "$(ls -A "$staged")" ] && [ ! -f "$staged/install.conf" ]; then
    df_die "$staged exists and holds something other than deskfleet: choose another --prefix"
  fi
}
