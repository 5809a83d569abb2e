#!/bin/sh
# Installs the cni-ipam binary on the node and keeps its kubeconfig current.
#
# The binary is copied under a temporary name in the CNI bin directory and
# renamed over cni-ipam (one file system, so the rename is atomic: a runtime
# executes the old binary or the new one, never a partial file). The
# kubeconfig names the API server (KUBERNETES_SERVICE_HOST and _PORT), its CA
# and the service account's projected token, and is also written under a
# temporary name and renamed; it is rewritten whenever the token file
# changes (the kubelet rotates it at 80 % of its lifetime), checked every
# REFRESH_SECONDS. ONCE=1 installs and writes once, then exits.
set -eu

BIN_SRC=${BIN_SRC:-/usr/local/bin/cni-ipam}
CNI_BIN_DIR=${CNI_BIN_DIR:-/host/opt/cni/bin}
CNI_CONF_DIR=${CNI_CONF_DIR:-/host/etc/cni/net.d}
TOKEN_DIR=${TOKEN_DIR:-/var/run/secrets/ipam}
KUBECONFIG_NAME=${KUBECONFIG_NAME:-cni-ipam.kubeconfig}
REFRESH_SECONDS=${REFRESH_SECONDS:-60}

log() { echo "install.sh: $*" >&2; }

install_binary() {
	tmp="$CNI_BIN_DIR/.cni-ipam.tmp.$$"
	cp "$BIN_SRC" "$tmp"
	chmod 0755 "$tmp"
	mv -f "$tmp" "$CNI_BIN_DIR/cni-ipam"
	log "installed $CNI_BIN_DIR/cni-ipam"
}

write_kubeconfig() {
	host=${KUBERNETES_SERVICE_HOST:?KUBERNETES_SERVICE_HOST is not set}
	port=${KUBERNETES_SERVICE_PORT:-443}
	case "$host" in *:*) host="[$host]" ;; esac
	ca=$(base64 < "$TOKEN_DIR/ca.crt" | tr -d '\n')
	token=$(cat "$TOKEN_DIR/token")
	tmp="$CNI_CONF_DIR/.$KUBECONFIG_NAME.tmp.$$"
	(
		umask 077
		cat > "$tmp" <<KUBECONFIG
# Written by cni-ipam's install.sh from the service account's token; rewritten when it rotates.
apiVersion: v1
kind: Config
clusters:
- name: local
  cluster:
    server: https://$host:$port
    certificate-authority-data: $ca
users:
- name: cni-ipam
  user:
    token: $token
contexts:
- name: cni-ipam
  context:
    cluster: local
    user: cni-ipam
current-context: cni-ipam
KUBECONFIG
	)
	mv -f "$tmp" "$CNI_CONF_DIR/$KUBECONFIG_NAME"
	log "wrote $CNI_CONF_DIR/$KUBECONFIG_NAME"
}

install_binary
last=$(cat "$TOKEN_DIR/token")
write_kubeconfig
[ -n "${ONCE:-}" ] && exit 0
while :; do
	sleep "$REFRESH_SECONDS"
	now=$(cat "$TOKEN_DIR/token")
	if [ "$now" != "$last" ] || [ ! -f "$CNI_CONF_DIR/$KUBECONFIG_NAME" ]; then
		write_kubeconfig
		last=$now
	fi
done
