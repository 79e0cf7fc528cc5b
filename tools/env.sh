# Sourced by tools/test and tools/demo: a virtualenv with flower-syncer and its dev dependencies,
# installed from scratch on a fresh machine and reused afterwards (reinstalled when pyproject.toml
# changes). Sets $venv and puts it first on PATH.
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
venv=${FLOWER_SYNCER_VENV:-$repo/.venv}
step() { printf '\n==> %s\n' "$*"; }

if [ ! -x "$venv/bin/python" ]; then
  step "creating virtualenv $venv"
  python3 -m venv "$venv"
fi
stamp="$venv/.installed-$(sha256sum "$repo/pyproject.toml" | cut -c1-16)"
if [ ! -e "$stamp" ]; then
  step "installing flower-syncer and its dev dependencies (about a minute the first time)"
  "$venv/bin/python" -m pip install --quiet --upgrade pip
  "$venv/bin/python" -m pip install --quiet -e "$repo[dev]"
  rm -f "$venv"/.installed-*
  touch "$stamp"
fi
export PATH="$venv/bin:$PATH"
missing=()
command -v openssl >/dev/null 2>&1 || missing+=(openssl)          # the local control plane's certificates
[ -x /usr/sbin/sshd ] || missing+=(openssh-server)                  # the SSH Git server of the source tests
command -v prometheus >/dev/null 2>&1 || missing+=(prometheus)     # dashboard and alert tests
[ -x /usr/bin/chromium ] || missing+=(chromium)                    # the web view's browser tests (Playwright drives it)
if [ ${#missing[@]} -gt 0 ]; then
  step "installing Debian packages: ${missing[*]}"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
