# Sourced by tools/test and tools/demo: a virtualenv with flower-syncer and its dev dependencies,
# installed from scratch on a fresh machine and reused afterwards (reinstalled when pyproject.toml
# changes), and the Debian packages the tests run. Sets $venv and puts it first on PATH.
#
# With FLOWER_SYNCER_ENV_DEFER=1 it only defines $repo, $venv and the functions below, and the caller
# runs them when it wants (tools/test installs the venv while the Go builds run).
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
venv=${FLOWER_SYNCER_VENV:-$repo/.venv}
step() { printf '\n==> %s\n' "$*"; }

# true when the venv is installed for this pyproject.toml
env_venv_ready() {
  [ -x "$venv/bin/python" ] && [ -e "$venv/.installed-$(sha256sum "$repo/pyproject.toml" | cut -c1-16)" ]
}

env_venv() {
  if [ ! -x "$venv/bin/python" ]; then
    step "creating virtualenv $venv"
    python3 -m venv "$venv"
  fi
  local stamp
  stamp="$venv/.installed-$(sha256sum "$repo/pyproject.toml" | cut -c1-16)"
  if [ ! -e "$stamp" ]; then
    step "installing flower-syncer and its dev dependencies (about a minute the first time)"
    "$venv/bin/python" -m pip install --quiet --upgrade pip
    "$venv/bin/python" -m pip install --quiet -e "$repo[dev]"
    rm -f "$venv"/.installed-*
    touch "$stamp"
  fi
}

# the Debian packages still to install, one line (empty when none)
env_missing_packages() {
  local missing=()
  command -v openssl >/dev/null 2>&1 || missing+=(openssl)          # the local control plane's certificates
  command -v gpg >/dev/null 2>&1 || missing+=(gnupg)                # OpenPGP signatures of commits (the admin's verify)
  [ -x /usr/sbin/sshd ] || missing+=(openssh-server)                  # the SSH Git server of the source tests
  command -v prometheus >/dev/null 2>&1 || missing+=(prometheus)     # dashboard and alert tests
  [ -x /usr/bin/chromium ] || missing+=(chromium)                    # the web view's browser tests (Playwright drives it)
  echo "${missing[*]}"
}

env_packages() {
  local missing
  read -r -a missing <<<"$(env_missing_packages)"
  if [ ${#missing[@]} -gt 0 ]; then
    step "installing Debian packages: ${missing[*]}"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  fi
}

if [ "${FLOWER_SYNCER_ENV_DEFER:-}" != 1 ]; then
  env_venv
  env_packages
fi
export PATH="$venv/bin:$PATH"
