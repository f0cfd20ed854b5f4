#!/usr/bin/env bash
# Install the Debian packages that the project's tools and tests use, when they are missing:
#   mosquitto, mosquitto-clients  interop tests against Debian's broker and its clients
#   openssl                       the certificate subject as OpenSSL prints it (use_subject_as_username tests)
#   tshark                        capture tests (pcap/pcapng files made and read back)
#   rabbitmq-server               interop tests against a second broker (its MQTT plugin)
#   openjdk-17-jre-headless       a Java runtime for Spark (`mqtt analyze`), when there is no java
#   python3-venv                  `python3 -m venv` on a bare Debian
#   systemd, logrotate            tests of docs/broker.md's unit (systemd-analyze verify) and logrotate snippet
#   chromium                      browser tests: MQTT.js against our ws:// listener; the HTML report looked at
#   nodejs, npm                   npm installs MQTT.js for that test (Makefile's web-deps), when there is no npm
#   prometheus                    promtool checks `mqtt serve`'s /metrics, and a real Prometheus server scrapes it
#   valgrind                      benchmarks/lat_instructions.py counts instructions with callgrind
#
# As root (with apt-get): installs what is missing with one `apt-get update` first, and keeps the
# services of the brokers it installed from starting (and stops/disables them should they start anyway):
# tests start their own instances on free ports. As another user, or without apt-get: prints what is
# missing and exits 0. When nothing is missing it does nothing, in a few milliseconds.
#
# Usage: scripts/install-system-deps.sh [PYTHON]   (PYTHON: the interpreter that will make .venv)
set -euo pipefail

python=${1:-python3}
sbin_path=/usr/sbin:/sbin:/usr/bin:/bin

have() { PATH="$PATH:$sbin_path" command -v "$1" >/dev/null 2>&1; }

missing=()
[ -x /usr/sbin/mosquitto ] || missing+=(mosquitto)
have mosquitto_pub || missing+=(mosquitto-clients)
have openssl || missing+=(openssl)
have tshark || missing+=(tshark)
{ [ -x /usr/sbin/rabbitmq-server ] || have rabbitmqctl; } || missing+=(rabbitmq-server)
{ have java || [ -x "${JAVA_HOME:-/nonexistent}/bin/java" ]; } || missing+=(openjdk-17-jre-headless)
have systemd-analyze || missing+=(systemd)
have logrotate || missing+=(logrotate)
have chromium || missing+=(chromium)
{ have node || have nodejs; } || missing+=(nodejs)
have npm || missing+=(npm)
have promtool || missing+=(prometheus)
have valgrind || missing+=(valgrind)  # benchmarks/lat_instructions.py counts instructions with callgrind
# Debian's python3 has venv but ensurepip only with python3-venv; only apt can help Debian's python.
if [ "$(command -v "$python" 2>/dev/null)" = /usr/bin/python3 ] || [ "$python" = /usr/bin/python3 ]; then
    /usr/bin/python3 -c 'import ensurepip, venv' >/dev/null 2>&1 || missing+=(python3-venv)
fi

[ ${#missing[@]} -eq 0 ] && exit 0

if [ "$(id -u)" -ne 0 ] || ! have apt-get; then
    echo "install-system-deps: missing ${missing[*]} (installing needs root and apt-get); skipped" >&2
    exit 0
fi

export PATH="$PATH:$sbin_path"
export DEBIAN_FRONTEND=noninteractive
start=$(date +%s)
echo "install-system-deps: installing ${missing[*]}"

# tshark's wireshark-common asks whether non-root users may capture: no (and never ask).
echo 'wireshark-common wireshark-common/install-setuid boolean false' | debconf-set-selections

# Keep maintainer scripts from starting services: invoke-rc.d and deb-systemd-invoke obey
# /usr/sbin/policy-rc.d, and exit status 101 means "action forbidden". Only put one there if there
# is none (containers often ship their own), and remove only ours.
policy=/usr/sbin/policy-rc.d
own_policy=0
if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\n# temporary, from mqtt-cli scripts/install-system-deps.sh\nexit 101\n' >"$policy"
    chmod 755 "$policy"
    own_policy=1
fi
cleanup() { if [ "$own_policy" -eq 1 ]; then rm -f "$policy"; fi; }
trap cleanup EXIT

apt-get update -qq
apt-get install -y -qq --no-install-recommends \
    -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold \
    "${missing[@]}" >/dev/null

# Belt and braces: should a broker we installed run anyway, stop it and keep it from starting at boot.
# Processes are matched by the service's own system user, so nothing else is touched.
stop_service() {
    local name=$1 user=$2
    if have systemctl && [ -d /run/systemd/system ]; then
        systemctl disable --now "$name" >/dev/null 2>&1 || true
    else
        service "$name" stop >/dev/null 2>&1 || invoke-rc.d "$name" stop >/dev/null 2>&1 || true
        update-rc.d "$name" disable >/dev/null 2>&1 || true
    fi
    if id "$user" >/dev/null 2>&1 && pgrep -u "$user" >/dev/null 2>&1; then
        pkill -u "$user" >/dev/null 2>&1 || true
    fi
}
for pkg in "${missing[@]}"; do
    case $pkg in
        mosquitto) stop_service mosquitto mosquitto ;;
        rabbitmq-server) stop_service rabbitmq-server rabbitmq ;;
        prometheus) stop_service prometheus prometheus ;;
    esac
done

echo "install-system-deps: done in $(($(date +%s) - start)) s"
