#!/bin/sh
# start.sh: builds this pod's node.toml and runs `certus serve` (docs/deploy.md, "On Kubernetes").
# kustomization.yaml puts this file into the ConfigMap certus-config; the StatefulSet runs it.
#
# `certus serve` takes one config file per node, with the node's id and addresses, so each pod
# writes its own from:
#   - its ordinal (POD_NAME certus-N): the first id of pod N is N+1;
#   - its stable name from the headless Service (POD_NAME.PEER_SERVICE.POD_NAMESPACE.svc): the
#     pod listens on every interface and advertises that name, which the cluster records for
#     it; the pod's IP may change whenever the pod is recreated, the name stays;
#   - common.toml from the ConfigMap: what every node shares ([raft], [sessions], [ct],
#     [[tokens]], ...);
#   - its node certificate, from the Secret certus-pki mounted at PKI_DIR: ca.pem,
#     node-POD_NAME.pem, node-POD_NAME-key.pem, issued for the pod's stable name and the client
#     Service's name (docs/deploy.md, "On Kubernetes"). The same certificate is this script's
#     identity when it asks the other pods about the cluster.
#
# What a fresh volume does is decided once and written next to the data, so that a restart
# never decides differently:
#   certus-node-id     the node's id (the pod's ordinal may not say it after a replacement)
#   certus-start-mode  found (pod 0 of a new cluster) or join (every other case)
#
# Safety: a fresh volume whose id the cluster already lists means that node's data is lost;
# starting it again under that id would break Raft's promises, so this script refuses and
# says how to replace the node instead.
set -eu

: "${POD_NAME:?POD_NAME is not set (the pod name, from the downward API)}"
: "${POD_NAMESPACE:?POD_NAMESPACE is not set (metadata.namespace, from the downward API)}"
: "${POD_IP:?POD_IP is not set (status.podIP, from the downward API)}"
: "${PEERS:?PEERS is not set (every pod gRPC host:port, comma-separated)}"
PEER_SERVICE=${PEER_SERVICE:-certus-peers}
DATA_DIR=${DATA_DIR:-/var/lib/certus}
CONFIG_DIR=${CONFIG_DIR:-/etc/certus}
RUN_DIR=${RUN_DIR:-/run/certus}
GRPC_PORT=${GRPC_PORT:-7101}
HTTP_PORT=${HTTP_PORT:-7181}
BIN=${BIN:-certus}
PKI_DIR=${PKI_DIR:-/etc/certus-pki}
# How long a fresh joining pod waits for a cluster with a leader before giving up (and being
# restarted by the kubelet).
WAIT_FOR_CLUSTER_S=${WAIT_FOR_CLUSTER_S:-300}

say() { echo "start.sh ($POD_NAME): $*" >&2; }
fail() {
    say "$*"
    # Slow the restart loop down a little, so the message stays readable in `kubectl logs`.
    sleep 10
    exit 1
}

# The name the cluster records for this pod: stable across restarts, unlike its IP.
self_name=$POD_NAME.$PEER_SERVICE.$POD_NAMESPACE.svc

tls_ca=$PKI_DIR/ca.pem
tls_cert=$PKI_DIR/node-$POD_NAME.pem
tls_key=$PKI_DIR/node-$POD_NAME-key.pem
for file in "$tls_ca" "$tls_cert" "$tls_key"; do
    [ -r "$file" ] || fail "cannot read $file: the Secret certus-pki needs ca.pem and this \
pod's node-$POD_NAME.pem and node-$POD_NAME-key.pem (certus pki issue --name \
node-$POD_NAME --role node --dns $self_name ...; docs/deploy.md, 'On Kubernetes')"
done

ordinal=${POD_NAME##*-}
case $ordinal in
'' | *[!0-9]*) fail "cannot read an ordinal from POD_NAME=$POD_NAME (expected NAME-N)" ;;
esac

# Listen on every interface of the pod's own IP family; advertise the stable name.
case $POD_IP in
*:*) any="[::]" ;; # IPv6
*) any=0.0.0.0 ;;
esac
self_grpc="$self_name:$GRPC_PORT"
self_http="$self_name:$HTTP_PORT"

# The other pods: every entry of PEERS but this pod's own.
others=""
old_ifs=$IFS
IFS=,
for peer in $PEERS; do
    case $peer in
    "$POD_NAME".* | "$self_grpc") ;;
    *) others="${others:+$others,}$peer" ;;
    esac
done
IFS=$old_ifs
[ -n "$others" ] || fail "PEERS ($PEERS) names no pod but this one"

# The cluster's members (JSON) if some other pod answers with a known leader; fails otherwise.
cluster_members() {
    out=$("$BIN" ctl --ca-cert "$tls_ca" --client-cert "$tls_cert" --client-key "$tls_key" \
        --endpoints "$others" --json members 2>/dev/null) || return 1
    case $out in
    *'"leader_id": 0,'*) return 1 ;;
    esac
    printf '%s\n' "$out"
}

lists_id() { # lists_id MEMBERS_JSON ID
    printf '%s\n' "$1" | grep -q "\"id\": $2,"
}

id_file=$DATA_DIR/certus-node-id
mode_file=$DATA_DIR/certus-start-mode

write_once() { # write_once FILE VALUE: atomically, so a crash never leaves half a file
    printf '%s\n' "$2" >"$1.tmp"
    mv "$1.tmp" "$1"
}

if [ -s "$id_file" ] && [ -s "$mode_file" ]; then
    id=$(cat "$id_file")
    mode=$(cat "$mode_file")
    say "restarting node $id ($mode) on its data"
elif [ -e "$DATA_DIR/raft" ]; then
    fail "$DATA_DIR holds Certus data but no $id_file or $mode_file; refusing to guess this node's id"
else
    if [ -s "$CONFIG_DIR/id-for-ordinal-$ordinal" ]; then
        id=$(cat "$CONFIG_DIR/id-for-ordinal-$ordinal")
    else
        id=$((ordinal + 1))
    fi
    case $id in
    '' | 0 | *[!0-9]*) fail "node id '$id' for ordinal $ordinal is not a number of at least 1" ;;
    esac
    state=$(cat "$CONFIG_DIR/cluster-state" 2>/dev/null || echo existing)
    if members=$(cluster_members); then
        lists_id "$members" "$id" && fail "node $id is a member of the running cluster, but \
$DATA_DIR is empty: its data is lost. Replace it (docs/deploy.md, 'Replace a failed node'): \
remove node $id from the voters, then set id-for-ordinal-$ordinal in the ConfigMap to an id \
never used before, and delete this pod."
        mode=join
    elif [ "$ordinal" = 0 ] && [ "$id" = 1 ] && [ "$state" = new ]; then
        mode=found
    else
        # A new cluster being founded by pod 0, or one that has no leader right now: wait.
        waited=0
        until members=$(cluster_members); do
            [ "$waited" -lt "$WAIT_FOR_CLUSTER_S" ] ||
                fail "no cluster with a leader answered at $others within ${WAIT_FOR_CLUSTER_S}s"
            say "waiting for a cluster with a leader at $others"
            sleep 5
            waited=$((waited + 5))
        done
        lists_id "$members" "$id" && fail "node $id is a member of the running cluster, but \
$DATA_DIR is empty: its data is lost; see docs/deploy.md, 'Replace a failed node'."
        mode=join
        # Pods joining together would race for the one membership change at a time: stagger.
        sleep $((ordinal * 3))
    fi
    mkdir -p "$DATA_DIR"
    write_once "$id_file" "$id"
    write_once "$mode_file" "$mode"
    say "fresh volume: node $id will $mode"
fi

mkdir -p "$RUN_DIR"
config=$RUN_DIR/node.toml
{
    echo "# Written by start.sh for $POD_NAME. The shared part below comes from common.toml."
    echo "id = $id"
    echo "grpc_addr = \"$any:$GRPC_PORT\""
    echo "http_addr = \"$any:$HTTP_PORT\""
    echo "advertise_grpc = \"$self_grpc\""
    echo "advertise_http = \"$self_http\""
    echo "data_dir = \"$DATA_DIR\""
    if [ "$mode" = join ]; then
        printf 'join = ["%s"]\n' "$(printf '%s' "$others" | sed 's/,/", "/g')"
    fi
    echo
    cat "$CONFIG_DIR/common.toml"
    printf '\n[tls]\nca_cert_file = "%s"\ncert_file = "%s"\nkey_file = "%s"\n' \
        "$tls_ca" "$tls_cert" "$tls_key"
    if [ "$mode" = found ]; then
        # A cluster of one, which the other pods then join (each adds itself under its own
        # name). Ignored once this node has data.
        printf '\n[[initial_members]]\nid = %s\ngrpc_addr = "%s"\nhttp_addr = "%s"\n' \
            "$id" "$self_grpc" "$self_http"
    fi
} >"$config.tmp"
mv "$config.tmp" "$config"

exec "$BIN" serve --config "$config"
