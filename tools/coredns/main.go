// A CoreDNS build with only the plugins the devcluster's real nodes need.
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/ready"
)

func init() {
	dnsserver.Directives = []string{"bind", "ready", "health", "errors", "log", "cache", "kubernetes"}
}

func main() { coremain.Run() }
