#!/usr/bin/env bash
# kube-up.sh starts a real single-node Kubernetes cluster on this machine for
# Ferry's tests and CI, and leaves it running (scripts/kube-down.sh stops it).
# Idempotent: when the cluster is already up and healthy it returns at once.
#
# What it runs, all as host processes owned by this script (pids in
# /run/ferry-kube/pids): etcd (Debian's, unpacked with dpkg -x), a private
# containerd (Debian's binary, own socket/root/state, CRI plugin), the
# Kubernetes control plane, a kubelet and kube-proxy built from
# scripts/kube/go.mod (cached in /var/cache/ferry-kube), and CoreDNS as a pod.
#
# The contract with the tests: the admin kubeconfig at
# /var/lib/ferry-kube/admin.kubeconfig; logs under /var/lib/ferry-kube/logs.
# Images: busybox (static) as ferry-kube-busybox:1, pods use
# imagePullPolicy: Never; scripts/kube-image.sh imports more.
# One cluster per machine: the bridge, cgroups and nft tables have fixed names.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)
K=/var/lib/ferry-kube
R=/run/ferry-kube
LOGS=$K/logs
PKI=$K/pki
NODE=ferry-kube
POD_CIDR=10.213.0.0/24
SVC_CIDR=10.214.0.0/16
SVC_API=10.214.0.1
SVC_DNS=10.214.0.10
ETCD_PORT=2479
API_PORT=6443
SOCK=$R/containerd.sock
export DEBIAN_FRONTEND=noninteractive
t0=$(date +%s.%N)
say() { echo "kube-up: $*"; }
die() { echo "kube-up: $*" >&2; exit 1; }
[ "$(id -u)" = 0 ] || die "needs root (it runs a kubelet and containerd)"
ADMIN=$K/admin.kubeconfig
# One kube-up or kube-down at a time (a second waits, then finds it up).
exec 9>/run/ferry-kube.lock
flock 9
export FERRY_KUBE_LOCKED=1

healthy() {
  [ -x $K/bin/kubectl ] && [ -f $ADMIN ] || return 1
  local p
  for p in etcd containerd kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy; do
    [ -f $R/pids/$p ] && kill -0 "$(cat $R/pids/$p)" 2>/dev/null || return 1
  done
  $K/bin/kubectl --kubeconfig $ADMIN --request-timeout=5s get --raw /readyz >/dev/null 2>&1 || return 1
  [ "$($K/bin/kubectl --kubeconfig $ADMIN --request-timeout=5s get node $NODE -o 'jsonpath={.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null)" = True ] || return 1
  [ "$($K/bin/kubectl --kubeconfig $ADMIN --request-timeout=5s -n kube-system get deploy coredns -o 'jsonpath={.status.readyReplicas}' 2>/dev/null)" = 1 ] || return 1
}
if healthy; then say "already up and healthy ($ADMIN)"; exit 0; fi
# Anything half-up from an earlier run goes first.
if [ -d $R/pids ] && ls $R/pids/* >/dev/null 2>&1; then
  say "a previous cluster is not healthy: stopping it first"
  bash "$repo/scripts/kube-down.sh" --keep-data
fi
mkdir -p $K $R/pids $LOGS $PKI $K/bin

# --- binaries ---------------------------------------------------------------
need=()
command -v containerd >/dev/null || need+=(containerd)
command -v runc >/dev/null || need+=(runc)
command -v nft >/dev/null || need+=(nftables)
command -v iptables >/dev/null || need+=(iptables)
command -v openssl >/dev/null || need+=(openssl)
command -v conntrack >/dev/null || need+=(conntrack)
if [ ${#need[@]} -gt 0 ]; then
  say "installing ${need[*]}"
  apt-get update -qq && apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
# Debian's containerd package may start its own daemon where there is
# systemd; ours uses its own socket, so they do not meet.
debs=${KUBE_CACHE:-/var/cache/ferry-kube}/debs
if [ ! -x $debs/root/usr/bin/etcd ] || [ ! -x $debs/root/usr/lib/cni/bridge ] || [ ! -x $debs/root/bin/busybox ]; then
  say "unpacking etcd-server, containernetworking-plugins, busybox-static (dpkg -x)"
  rm -rf $debs && mkdir -p $debs/root
  (cd $debs && apt-get download etcd-server containernetworking-plugins busybox-static >/dev/null 2>&1) || {
    apt-get update -qq; (cd $debs && apt-get download etcd-server containernetworking-plugins busybox-static >/dev/null); }
  for d in $debs/*.deb; do dpkg -x "$d" $debs/root; done
fi
tb=$(date +%s)
bindir=$(bash scripts/kube/build.sh) || die "building the Kubernetes binaries failed"
[ $(( $(date +%s) - tb )) -gt 5 ] && say "binaries built in $(( $(date +%s) - tb )) s"
for c in kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl kube-proxy coredns; do
  ln -sf "$bindir/$c" $K/bin/$c
done
ln -sf $debs/root/usr/bin/etcd $K/bin/etcd
mkdir -p $K/cni/bin $K/cni/net.d
cp -f $debs/root/usr/lib/cni/* $K/cni/bin/
if [ ! -x $K/bin/pause ] || [ scripts/kube/pause/main.go -nt $K/bin/pause ]; then
  (cd scripts/kube && CGO_ENABLED=0 GOFLAGS=-mod=mod go build -trimpath -ldflags '-s -w' -o $K/bin/pause ./pause)
fi
KC="$K/bin/kubectl --kubeconfig $ADMIN"

# --- host settings ----------------------------------------------------------
# The sysctls the kubelet (and pod routing) change, recorded once so that
# kube-down.sh puts them back.
SYSCTLS="vm.overcommit_memory vm.panic_on_oom kernel.panic kernel.panic_on_oops kernel.keys.root_maxkeys kernel.keys.root_maxbytes net.ipv4.ip_forward"
if [ ! -f $K/sysctl.saved ]; then
  for s in $SYSCTLS; do echo "$s=$(sysctl -n $s)"; done > $K/sysctl.saved.tmp && mv $K/sysctl.saved.tmp $K/sysctl.saved
fi
sysctl -qw net.ipv4.ip_forward=1
modprobe overlay 2>/dev/null || true
modprobe br_netfilter 2>/dev/null || true
HOST_IP=$(ip -4 route get 1.1.1.1 2>/dev/null | awk '{for(i=1;i<NF;i++) if ($i=="src") {print $(i+1); exit}}')
[ -n "$HOST_IP" ] || HOST_IP=$(hostname -I | awk '{print $1}')
[ -n "$HOST_IP" ] || die "no IPv4 address for the node"

# --- certificates and kubeconfigs --------------------------------------------
cert() { # name CN O [server SANs]
  local n=$1 cn=$2 o=$3 san=${4:-}
  [ -f $PKI/$n.crt ] && [ "$(cat $PKI/$n.san 2>/dev/null)" = "$san" ] && return 0
  openssl genrsa -out $PKI/$n.key 2048 2>/dev/null
  local subj="/CN=$cn"; [ -n "$o" ] && subj="/O=$o/CN=$cn"
  local ext=$PKI/$n.ext
  if [ -n "$san" ]; then
    printf 'basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth,clientAuth\nsubjectAltName=%s\n' "$san" > $ext
  else
    printf 'basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=clientAuth\n' > $ext
  fi
  openssl req -new -key $PKI/$n.key -subj "$subj" -out $PKI/$n.csr 2>/dev/null
  openssl x509 -req -in $PKI/$n.csr -CA $PKI/ca.crt -CAkey $PKI/ca.key -CAcreateserial -days 3650 \
    -extfile $ext -out $PKI/$n.crt 2>/dev/null
  echo "$san" > $PKI/$n.san
  rm -f $PKI/$n.csr $ext
}
if [ ! -f $PKI/ca.crt ]; then
  openssl genrsa -out $PKI/ca.key 2048 2>/dev/null
  openssl req -x509 -new -key $PKI/ca.key -subj /CN=ferry-kube-ca -days 3650 -out $PKI/ca.crt 2>/dev/null
fi
[ -f $PKI/sa.key ] || { openssl genrsa -out $PKI/sa.key 2048 2>/dev/null; openssl rsa -in $PKI/sa.key -pubout -out $PKI/sa.pub 2>/dev/null; }
cert apiserver kube-apiserver "" "DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local,DNS:localhost,IP:127.0.0.1,IP:$SVC_API,IP:$HOST_IP"
cert apiserver-kubelet-client kube-apiserver-kubelet-client system:masters
cert admin ferry-admin system:masters
cert controller-manager system:kube-controller-manager ""
cert scheduler system:kube-scheduler ""
cert kubelet system:node:$NODE system:nodes
cert kube-proxy system:kube-proxy ""
chmod 600 $PKI/*.key
kubeconfig() { # file cert server
  local b64="base64 -w0"
  cat > $K/$1.kubeconfig.tmp <<KCEOF
apiVersion: v1
kind: Config
clusters:
- name: ferry-kube
  cluster:
    server: $3
    certificate-authority-data: $($b64 < $PKI/ca.crt)
users:
- name: $2
  user:
    client-certificate-data: $($b64 < $PKI/$2.crt)
    client-key-data: $($b64 < $PKI/$2.key)
contexts:
- name: ferry-kube
  context: {cluster: ferry-kube, user: $2, namespace: default}
current-context: ferry-kube
KCEOF
  chmod 600 $K/$1.kubeconfig.tmp && mv $K/$1.kubeconfig.tmp $K/$1.kubeconfig
}
kubeconfig admin admin https://$HOST_IP:$API_PORT
kubeconfig controller-manager controller-manager https://127.0.0.1:$API_PORT
kubeconfig scheduler scheduler https://127.0.0.1:$API_PORT
kubeconfig kubelet kubelet https://127.0.0.1:$API_PORT
kubeconfig kube-proxy kube-proxy https://127.0.0.1:$API_PORT

# --- processes --------------------------------------------------------------
start() { # name command...
  local n=$1; shift
  if [ -f $R/pids/$n ] && kill -0 "$(cat $R/pids/$n)" 2>/dev/null; then return 0; fi
  # A log over 50 MB moves to NAME.log.1 (replacing the older one) at the next start.
  if [ "$(stat -c %s $LOGS/$n.log 2>/dev/null || echo 0)" -gt 50000000 ]; then mv -f $LOGS/$n.log $LOGS/$n.log.1; fi
  setsid "$@" >>$LOGS/$n.log 2>&1 < /dev/null 9>&- &
  echo $! > $R/pids/$n
}
waitfor() { # what seconds command...
  local what=$1 n=$2; shift 2
  for _ in $(seq $((n * 5))); do "$@" >/dev/null 2>&1 && return 0; sleep 0.2; done
  die "$what did not come up in ${n}s; see $LOGS"
}

install -d -m 700 $K/etcd
start etcd $K/bin/etcd --name ferry-kube --data-dir $K/etcd \
  --listen-client-urls http://127.0.0.1:$ETCD_PORT --advertise-client-urls http://127.0.0.1:$ETCD_PORT \
  --listen-peer-urls http://127.0.0.1:$((ETCD_PORT + 1)) --initial-advertise-peer-urls http://127.0.0.1:$((ETCD_PORT + 1)) \
  --initial-cluster ferry-kube=http://127.0.0.1:$((ETCD_PORT + 1)) --log-level warn

mkdir -p $K/containerd/root $K/containerd/opt $R/containerd
cat > $K/containerd.toml <<CEOF
version = 2
root = "$K/containerd/root"
state = "$R/containerd/state"
disabled_plugins = ["io.containerd.internal.v1.tracing", "io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper"]
[grpc]
  address = "$SOCK"
[ttrpc]
  address = "$R/containerd.sock.ttrpc"
[debug]
  address = ""
[metrics]
  address = ""
[plugins."io.containerd.internal.v1.opt"]
  path = "$K/containerd/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "docker.io/library/ferry-kube-pause:1"
  restrict_oom_score_adj = true
  enable_selinux = false
  netns_mounts_under_state_dir = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "$K/cni/bin"
    conf_dir = "$K/cni/net.d"
CEOF
cat > $K/cni/net.d/10-ferry-kube.conflist <<CEOF
{
  "cniVersion": "1.0.0",
  "name": "ferry-kube",
  "plugins": [
    {"type": "bridge", "bridge": "ferrykube0", "isGateway": true, "ipMasq": true, "hairpinMode": true,
     "ipam": {"type": "host-local", "dataDir": "$K/cni/ipam", "ranges": [[{"subnet": "$POD_CIDR"}]], "routes": [{"dst": "0.0.0.0/0"}]}},
    {"type": "firewall"}
  ]
}
CEOF
start containerd containerd --config $K/containerd.toml
waitfor containerd 30 ctr --address $SOCK version

# Images: the pod sandbox (pause), busybox and CoreDNS, each a static binary
# in an otherwise empty filesystem, made with docker import and copied in.
image() { # name rootfs-dir entrypoint-json
  local name=$1 dir=$2 ep=$3 stamp
  stamp=$(tar -C "$dir" --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -c . | sha256sum | cut -c1-16)
  if [ "$(docker image inspect -f '{{index .Config.Labels "ferry.kube.stamp"}}' "$name" 2>/dev/null)" != "$stamp" ]; then
    tar -C "$dir" -c . | docker import -c "ENTRYPOINT $ep" -c "LABEL ferry.kube.stamp=$stamp" - "$name" >/dev/null
  fi
  if ! ctr --address $SOCK -n k8s.io images ls -q | grep -qx "docker.io/library/$name" ||
     [ "$(cat $K/images/$name 2>/dev/null)" != "$stamp" ]; then
    bash scripts/kube-image.sh "$name"
    mkdir -p $K/images && echo "$stamp" > $K/images/$name
  fi
}
docker info >/dev/null 2>&1 || die "no Docker engine answers (the cluster's images are made with docker import)"
rf=$K/rootfs
rm -rf $rf && mkdir -p $rf/pause $rf/busybox/bin $rf/busybox/tmp $rf/coredns
cp $K/bin/pause $rf/pause/pause
cp $debs/root/bin/busybox $rf/busybox/bin/busybox
for a in $($rf/busybox/bin/busybox --list); do [ "$a" = busybox ] || ln -s busybox $rf/busybox/bin/$a; done
cp -L $K/bin/coredns $rf/coredns/coredns
image ferry-kube-pause:1 $rf/pause '["/pause"]'
image ferry-kube-busybox:1 $rf/busybox '["/bin/sh"]'
image ferry-kube-coredns:1 $rf/coredns '["/coredns"]'
rm -rf $rf

start kube-apiserver $K/bin/kube-apiserver \
  --etcd-servers=http://127.0.0.1:$ETCD_PORT --advertise-address=$HOST_IP --secure-port=$API_PORT \
  --client-ca-file=$PKI/ca.crt --tls-cert-file=$PKI/apiserver.crt --tls-private-key-file=$PKI/apiserver.key \
  --kubelet-client-certificate=$PKI/apiserver-kubelet-client.crt --kubelet-client-key=$PKI/apiserver-kubelet-client.key \
  --service-account-issuer=https://kubernetes.default.svc.cluster.local --service-account-key-file=$PKI/sa.pub \
  --service-account-signing-key-file=$PKI/sa.key --service-cluster-ip-range=$SVC_CIDR \
  --authorization-mode=Node,RBAC --enable-admission-plugins=NodeRestriction --allow-privileged=true \
  --kubelet-preferred-address-types=InternalIP,Hostname \
  --profiling=false
waitfor kube-apiserver 120 $KC --request-timeout=5s get --raw /readyz
start kube-controller-manager $K/bin/kube-controller-manager \
  --kubeconfig=$K/controller-manager.kubeconfig --authentication-kubeconfig=$K/controller-manager.kubeconfig \
  --authorization-kubeconfig=$K/controller-manager.kubeconfig --bind-address=127.0.0.1 --leader-elect=false \
  --service-account-private-key-file=$PKI/sa.key --root-ca-file=$PKI/ca.crt --use-service-account-credentials=true \
  --cluster-signing-cert-file=$PKI/ca.crt --cluster-signing-key-file=$PKI/ca.key --service-cluster-ip-range=$SVC_CIDR \
  --profiling=false
start kube-scheduler $K/bin/kube-scheduler --kubeconfig=$K/scheduler.kubeconfig \
  --authentication-kubeconfig=$K/scheduler.kubeconfig --authorization-kubeconfig=$K/scheduler.kubeconfig \
  --bind-address=127.0.0.1 --leader-elect=false --profiling=false

mkdir -p $K/kubelet
cat > $K/kubelet.yaml <<KEOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $PKI/ca.crt}
authorization: {mode: Webhook}
cgroupDriver: cgroupfs
failCgroupV1: false
failSwapOn: false
makeIPTablesUtilChains: false
containerRuntimeEndpoint: unix://$SOCK
clusterDNS: [$SVC_DNS]
clusterDomain: cluster.local
resolvConf: /etc/resolv.conf
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
serializeImagePulls: false
imageGCHighThresholdPercent: 99
imageGCLowThresholdPercent: 98
evictionHard: {memory.available: "50Mi", nodefs.available: "1%", nodefs.inodesFree: "1%", imagefs.available: "1%"}
podPidsLimit: -1
KEOF
start kubelet $K/bin/kubelet --config=$K/kubelet.yaml --kubeconfig=$K/kubelet.kubeconfig \
  --hostname-override=$NODE --node-ip=$HOST_IP --root-dir=$K/kubelet --cert-dir=$K/kubelet/pki

# kube-proxy (nftables) exits when its config file is rewritten: write it
# only when it changes.
cat > $K/kube-proxy.yaml.new <<PEOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: nftables
clientConnection: {kubeconfig: $K/kube-proxy.kubeconfig}
hostnameOverride: $NODE
clusterCIDR: $POD_CIDR
metricsBindAddress: 127.0.0.1:10249
healthzBindAddress: 127.0.0.1:10256
nftables: {masqueradeAll: true}
conntrack: {maxPerCore: 0, min: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
PEOF
if cmp -s $K/kube-proxy.yaml.new $K/kube-proxy.yaml; then rm $K/kube-proxy.yaml.new; else mv $K/kube-proxy.yaml.new $K/kube-proxy.yaml; fi
start kube-proxy $K/bin/kube-proxy --config=$K/kube-proxy.yaml

ready() { [ "$($KC get node $NODE -o 'jsonpath={.status.conditions[?(@.type=="Ready")].status}')" = True ]; }
waitfor "node $NODE Ready" 180 ready
say "node Ready $(awk -v a=$t0 -v b=$(date +%s.%N) 'BEGIN{printf "%.1f", b-a}') s after start"

# --- CoreDNS ----------------------------------------------------------------
# cluster.local and reverse zones from the API; every other name NXDOMAIN
# (there is no upstream DNS).
$KC apply -f - >/dev/null <<DEOF
apiVersion: v1
kind: ServiceAccount
metadata: {name: coredns, namespace: kube-system}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: "system:coredns"}
rules:
- {apiGroups: [""], resources: [endpoints, services, pods, namespaces], verbs: [list, watch]}
- {apiGroups: [discovery.k8s.io], resources: [endpointslices], verbs: [list, watch]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: "system:coredns"}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: "system:coredns"}
subjects: [{kind: ServiceAccount, name: coredns, namespace: kube-system}]
---
apiVersion: v1
kind: ConfigMap
metadata: {name: coredns, namespace: kube-system}
data:
  Corefile: |
    cluster.local:53 in-addr.arpa:53 ip6.arpa:53 {
        errors
        health :8080
        ready :8181
        kubernetes cluster.local in-addr.arpa ip6.arpa {
            pods insecure
        }
        cache 30
    }
    .:53 {
        errors
        template ANY ANY {
            rcode NXDOMAIN
        }
    }
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: coredns, namespace: kube-system, labels: {k8s-app: kube-dns}}
spec:
  replicas: 1
  selector: {matchLabels: {k8s-app: kube-dns}}
  template:
    metadata: {labels: {k8s-app: kube-dns}}
    spec:
      serviceAccountName: coredns
      priorityClassName: system-cluster-critical
      dnsPolicy: Default
      containers:
      - name: coredns
        image: ferry-kube-coredns:1
        imagePullPolicy: Never
        args: [-conf, /etc/coredns/Corefile]
        volumeMounts: [{name: config, mountPath: /etc/coredns, readOnly: true}]
        ports:
        - {name: dns, containerPort: 53, protocol: UDP}
        - {name: dns-tcp, containerPort: 53, protocol: TCP}
        readinessProbe: {httpGet: {path: /ready, port: 8181}, periodSeconds: 2}
        livenessProbe: {httpGet: {path: /health, port: 8080}, periodSeconds: 10}
        resources: {requests: {cpu: 10m, memory: 30Mi}, limits: {memory: 170Mi}}
      volumes: [{name: config, configMap: {name: coredns}}]
---
apiVersion: v1
kind: Service
metadata: {name: kube-dns, namespace: kube-system, labels: {k8s-app: kube-dns}}
spec:
  clusterIP: $SVC_DNS
  selector: {k8s-app: kube-dns}
  ports:
  - {name: dns, port: 53, protocol: UDP}
  - {name: dns-tcp, port: 53, protocol: TCP}
DEOF
dns() { [ "$($KC -n kube-system get deploy coredns -o 'jsonpath={.status.readyReplicas}')" = 1 ]; }
waitfor "CoreDNS" 180 dns
say "up in $(awk -v a=$t0 -v b=$(date +%s.%N) 'BEGIN{printf "%.1f", b-a}') s: KUBECONFIG=$ADMIN (logs in $LOGS)"
