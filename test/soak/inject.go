package main

import (
	"context"
	"fmt"

	egressv1 "github.com/egress-proxies-operator/egress-proxies-operator/api/v1alpha1"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
)

// The --inject-leak modes. Each makes, through the soaked provider itself
// (the same objects or domain and volumes, the same marks), an instance
// the operator never recorded:
//
//   - behind: for the Proxy about to be deleted, under a name of a shape
//     it never had: the instance a crash between Create and the status
//     write leaves once the spec moved on. The deletion lists the
//     provider and must find it by its UID mark and delete it: with an
//     operator that does, the run PASSES with these injected (0 leaked).
//   - late: with the UID of a cycle's Proxy just after it is gone: an
//     instance that appeared once its deletion had finished, which no
//     reconcile can see any more. The collector's job, and it never runs
//     a deleting pass here: always LEAKED.
//   - orphan: with the UID of a Proxy that never existed: also the
//     collector's job, always LEAKED.
const (
	injectBehind = "behind"
	injectLate   = "late"
	injectOrphan = "orphan"
)

// injectLeak makes an instance for px (read just before its deletion).
func (s *soak) injectLeak(ctx context.Context, px *egressv1.Proxy) error {
	req := provider.CreateRequest{
		Namespace:           px.Namespace,
		ProxyName:           px.Name,
		UID:                 string(px.UID),
		Port:                px.Spec.Port,
		AllowedSourceRanges: px.Spec.AllowedSourceRanges,
	}
	if s.opts.inject == injectOrphan {
		req.ProxyName = "never-" + px.Name
		req.UID = "soak-orphan-" + string(px.UID)
	}
	req.Name = provider.InstanceName(req.Namespace, req.ProxyName, req.UID, "soak-injected-"+s.opts.inject)
	s.injectorOnce.Do(func() { s.injector, s.injectorErr = s.backend.newInjector() })
	if s.injectorErr != nil {
		return s.injectorErr
	}
	inst, err := s.injector.Create(ctx, req)
	if err == nil {
		err = s.backend.settle(ctx, req, inst)
	}
	if err != nil {
		return fmt.Errorf("injecting an instance for %s: %w", px.Name, err)
	}
	s.stats.add(func(st *stats) {
		st.injected++
		if st.injectedUIDs == nil {
			st.injectedUIDs = map[string]bool{}
		}
		st.injectedUIDs[req.UID] = true
	})
	s.out.say("injected %s: instance %s (uid %s) behind the operator's back", s.opts.inject, inst.ID, req.UID)
	return nil
}
