#!/bin/bash
# cgfloor.sh GROUP MODE [CERT]: server-thread Ir per handshake of tls_floor client-thread, by difference of N=40 and N=120
set -euo pipefail
group=$1 mode=$2 cert=${3:-ecdsa}
F=${FLOOR:-/work/tg-tlshs/release/tls_floor}
C=/tmp/tlshs/certs
d=$(mktemp -d -p /tmp/tlshs)
ir() {
  valgrind --tool=callgrind --separate-threads=yes --callgrind-out-file=$d/cg.$1 \
    $F $C/ca.pem $C/$cert.pem $C/$cert.key $group $mode $1 client-thread >/dev/null 2>&1
  grep -h "^summary:" $d/cg.$1-01 | awk '{print $2}'
}
a=$(ir 40); b=$(ir 120)
echo "floor $cert $group $mode: Ir(N=40)=$a Ir(N=120)=$b server Ir/handshake=$(python3 -c "print(round(($b-$a)/(5*80)))") ($d)"
