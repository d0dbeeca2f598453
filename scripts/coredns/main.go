// The local cluster's DNS: CoreDNS with only the plugins its Corefile uses (src/devenv/cluster-dns.ts).
// CoreDNS' own main links every plugin, with the cloud SDKs of route53, azure and clouddns; this
// one compiles in a fraction of the time. Add a plugin here when the Corefile uses a new one.
package main

import (
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/loop"
	_ "github.com/coredns/coredns/plugin/ready"
	_ "github.com/coredns/coredns/plugin/reload"
)

func main() {
	coremain.Run()
}
