package kubernetes

import (
	"net/netip"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/egress"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/squid"
)

// Paths inside the Pod.
const (
	confDir     = "/etc/squid-operator"
	confFile    = "squid.conf"
	runDir      = "/var/run/squid"
	spoolDir    = "/var/spool/squid"
	cacheDir    = "/var/cache/squid"
	logDir      = "/var/log/squid"
	tmpDir      = "/tmp"
	pidFilePath = runDir + "/squid.pid"
)

// podSquidConf is the Pod's squid.conf: the shared generator with the
// Pod's paths, the admitted ranges, the entry's destination policy and,
// with users, the mounted htpasswd file; with echoProber, the mounted
// token that admits the operator's ask of the entry's echo (echo.go).
func podSquidConf(port int32, ranges []netip.Prefix, dest *egress.Policy, users, echoProber bool) string {
	var auth *squid.Auth
	if users {
		auth = &squid.Auth{PasswordFile: usersDir + "/" + usersKey}
	}
	var prober *squid.EchoProber
	if echoProber {
		prober = &squid.EchoProber{TokenFile: usersDir + "/" + echoTokenKey}
	}
	return squid.Config(squid.Params{
		Auth:         auth,
		EchoProber:   prober,
		Generator:    "egress-proxies-operator (kubernetes provider)",
		Port:         port,
		Clients:      ranges,
		Destinations: dest,
		PidFile:      pidFilePath,
		CoredumpDir:  spoolDir,
	})
}
