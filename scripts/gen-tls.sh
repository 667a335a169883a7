#!/usr/bin/env bash
# Makes a self-signed TLS certificate for trying shoal's HTTPS and WSS trackers on a
# test machine (clients must be told to trust it or to skip verification). For a
# public tracker use a certificate from a CA (e.g. Let's Encrypt) instead.
#
#   scripts/gen-tls.sh [DIR] [NAME]      # default: ./tls localhost
#
# Writes DIR/cert.pem and DIR/key.pem (ECDSA P-256, PKCS#8), valid for 30 days for
# NAME, 127.0.0.1 and ::1.
set -euo pipefail
dir="${1:-tls}"
name="${2:-localhost}"
if ! command -v openssl >/dev/null; then
    echo "openssl is required (apt-get install openssl)" >&2
    exit 1
fi
mkdir -p "$dir"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 30 \
    -subj "/CN=$name" \
    -addext "subjectAltName=DNS:$name,IP:127.0.0.1,IP:::1" \
    -keyout "$dir/key.pem" -out "$dir/cert.pem" 2>/dev/null
chmod 600 "$dir/key.pem"
echo "wrote $dir/cert.pem and $dir/key.pem for $name"
