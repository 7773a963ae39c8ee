#!/usr/bin/env bash
# Makes what the compose cluster needs to run encrypted, once, into DIR
# (default examples/payment/deploy/tls, ignored by git):
#
#   ca.pem                 a CA of this cluster alone (its key: ca.key)
#   paymentN.crt/.key      each node's certificate, naming the node id among
#                          its DNS names (the transport's mutual TLS checks it)
#   gossip.key             base64 of a random 32-byte key: memberlist's
#                          AES-256 gossip encryption
#
#   scripts/cluster-certs.sh [DIR]
#
# It keeps what exists (delete DIR to start over) and needs openssl. The
# files are world-readable: the containers run as nobody. This is a
# development cluster's keying, not a production PKI.
set -Eeuo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DIR="${1:-$ROOT/examples/payment/deploy/tls}"
NODES=(payment1 payment2 payment3)

command -v openssl >/dev/null || { echo "cluster-certs: needs openssl (apt-get install openssl)" >&2; exit 1; }
mkdir -p "$DIR"
cd "$DIR"

if [ ! -s ca.pem ]; then
	openssl ecparam -name prime256v1 -genkey -noout -out ca.key 2>/dev/null
	openssl req -x509 -new -key ca.key -sha256 -days 825 -subj "/CN=shoal payment cluster CA" \
		-addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" -out ca.pem
	echo "cluster-certs: made a CA in $DIR" >&2
fi
for n in "${NODES[@]}"; do
	[ -s "$n.crt" ] && continue
	openssl ecparam -name prime256v1 -genkey -noout 2>/dev/null | openssl pkcs8 -topk8 -nocrypt -out "$n.key"
	openssl req -new -key "$n.key" -subj "/CN=$n" -out "$n.csr"
	printf 'subjectAltName=DNS:%s\nbasicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth,clientAuth\n' "$n" >"$n.ext"
	openssl x509 -req -in "$n.csr" -CA ca.pem -CAkey ca.key -CAcreateserial -days 825 -sha256 -extfile "$n.ext" -out "$n.crt" 2>/dev/null
	rm -f "$n.csr" "$n.ext"
	echo "cluster-certs: made $n's certificate" >&2
done
if [ ! -s gossip.key ]; then
	openssl rand -base64 32 >gossip.key
	echo "cluster-certs: made the gossip key" >&2
fi
chmod 0644 ./*.pem ./*.crt ./*.key
chmod 0600 ca.key
