#!/usr/bin/env bash
# make_test_ca.sh OUTDIR [NAME...]: a throw-away certificate authority and one certificate per
# daemon, for mutual TLS between the daemons on a developer's machine and in the tests
# (tests/daemons/security_test.cc). FOR LOCAL USE AND TESTS ONLY: the CA's key lies unencrypted
# beside its certificate and the certificates name localhost. A real cluster's CA and
# certificates come from its own PKI (cert-manager, Vault, ...); docs/CONFIG.md, "Securing a
# cluster", says which keys take them.
#
# Writes into OUTDIR (created if missing):
#   ca.pem, ca.key            the CA (ECDSA P-256, 30 days); reused when OUTDIR already has one
#   NAME.pem, NAME.key        for each NAME (default: prefill decode), signed by the CA:
#                             CN=NAME, subjectAltName DNS:NAME, DNS:localhost, IP:127.0.0.1
#                             (plus $EXTRA_SANS, e.g. "DNS:decode-0.scd,IP:10.0.0.5"), usable
#                             as server and as client certificate (each daemon is both)
# Two runs into two directories give two unrelated CAs: a certificate of one is refused by a
# daemon trusting the other. Needs the openssl command-line tool.
set -euo pipefail

if [[ $# -lt 1 || "$1" == -h || "$1" == --help ]]; then
  sed -n '2,/^[^#]/{/^#/p}' "$0" | sed 's/^# \{0,1\}//'
  [[ $# -lt 1 ]] && exit 2 || exit 0
fi
OUT="$1"
shift
NAMES=("$@")
[[ ${#NAMES[@]} -gt 0 ]] || NAMES=(prefill decode)
DAYS="${DAYS:-30}"

command -v openssl >/dev/null || { echo "make_test_ca.sh: openssl is not installed" >&2; exit 1; }
for name in "${NAMES[@]}"; do
  [[ "$name" =~ ^[A-Za-z0-9][A-Za-z0-9.-]*$ ]] ||
    { echo "make_test_ca.sh: '$name' is not a host-like name" >&2; exit 2; }
done
mkdir -p "$OUT"
umask 077  # private keys readable by their owner only

if [[ -f "$OUT/ca.pem" && -f "$OUT/ca.key" ]]; then
  printf '==> reusing the test CA in %s\n' "$OUT" >&2
else
  printf '==> making a test CA in %s (local use and tests only)\n' "$OUT" >&2
  openssl ecparam -name prime256v1 -genkey -noout -out "$OUT/ca.key.tmp"
  openssl pkcs8 -topk8 -nocrypt -in "$OUT/ca.key.tmp" -out "$OUT/ca.key"
  rm -f "$OUT/ca.key.tmp"
  openssl req -x509 -new -key "$OUT/ca.key" -sha256 -days "$DAYS" \
    -subj "/O=SCD-Serve test/CN=SCD-Serve test CA $(date -u +%Y%m%dT%H%M%S)-$RANDOM" \
    -addext "basicConstraints=critical,CA:TRUE" \
    -addext "keyUsage=critical,keyCertSign,cRLSign" \
    -out "$OUT/ca.pem" 2>/dev/null
fi

for name in "${NAMES[@]}"; do
  printf '==> certificate for %s: %s/%s.pem, %s/%s.key\n' "$name" "$OUT" "$name" "$OUT" "$name" >&2
  sans="DNS:${name},DNS:localhost,IP:127.0.0.1${EXTRA_SANS:+,${EXTRA_SANS}}"
  ext="$OUT/$name.ext"
  cat >"$ext" <<EOF
basicConstraints=critical,CA:FALSE
keyUsage=critical,digitalSignature
extendedKeyUsage=serverAuth,clientAuth
subjectAltName=${sans}
EOF
  openssl ecparam -name prime256v1 -genkey -noout -out "$OUT/$name.key.tmp"
  openssl pkcs8 -topk8 -nocrypt -in "$OUT/$name.key.tmp" -out "$OUT/$name.key"
  rm -f "$OUT/$name.key.tmp"
  openssl req -new -key "$OUT/$name.key" -subj "/O=SCD-Serve test/CN=${name}" \
    -out "$OUT/$name.csr"
  openssl x509 -req -in "$OUT/$name.csr" -CA "$OUT/ca.pem" -CAkey "$OUT/ca.key" \
    -set_serial "0x$(openssl rand -hex 16)" -days "$DAYS" -sha256 -extfile "$ext" \
    -out "$OUT/$name.pem" 2>/dev/null
  rm -f "$OUT/$name.csr" "$ext"
  openssl verify -CAfile "$OUT/ca.pem" -purpose sslclient "$OUT/$name.pem" >/dev/null
done
chmod 0644 "$OUT"/*.pem
printf '==> done: CA %s/ca.pem (grpc.tls.ca, control_plane.tls.ca, data_plane.decode_tls.ca)\n' \
  "$OUT" >&2
