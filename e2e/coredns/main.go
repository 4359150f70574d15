// Command coredns is the cluster DNS server of the local cluster: CoreDNS with the plugins that
// kubeadm's default Corefile uses (errors, health, ready, kubernetes, prometheus, forward, cache,
// loop, reload, loadbalance) and a few that are commonly added to it (log, hosts, rewrite, whoami),
// instead of every plugin CoreDNS ships. That leaves out the cloud DNS back ends and their SDKs and
// makes the build several times faster. Built by scripts/build-node.sh.
package main

import (
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/forward"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/hosts"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/loadbalance"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/loop"
	_ "github.com/coredns/coredns/plugin/metrics"
	_ "github.com/coredns/coredns/plugin/ready"
	_ "github.com/coredns/coredns/plugin/reload"
	_ "github.com/coredns/coredns/plugin/rewrite"
	_ "github.com/coredns/coredns/plugin/whoami"
)

func main() {
	coremain.Run()
}
