package kubernetes

import (
	"testing"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/squid/squidtest"
)

// TestSquid_RealSquid: the Pod's squid.conf, as the ConfigMap holds it,
// parses with the real Squid, for admitted ranges, the loopback default
// and an entry with destination exceptions and cluster ranges. What the
// rules do on the wire is proven in internal/provider/squid
// (TestDestinationsDeniedByDefault_RealSquid, TestRealSquid_Clients).
func TestSquid_RealSquid(t *testing.T) {
	withPolicy := Config{ClusterCIDRs: []string{"10.96.0.0/12", "fd00:10:96::/112"}}
	withPolicy.AllowedDestinations = []string{"10.20.30.40/32"}
	withPolicy.ConnectPorts = []int32{443, 8443}
	for _, cfg := range []Config{{}, withPolicy} {
		p := pureProvider(t, cfg)
		for _, ranges := range [][]string{{"10.0.0.0/8", "fd00::/8"}, nil} {
			req := baseRequest()
			req.AllowedSourceRanges = ranges
			s, err := p.resolve(req)
			if err != nil {
				t.Fatal(err)
			}
			if out, err := squidtest.Parse(t, p.buildConfigMap(s).Data[confFile]); err != nil {
				t.Errorf("squid -k parse refused the Pod's config (ranges %v, entry %+v): %v\n%s", ranges, cfg, err, out)
			}
		}
	}
}
