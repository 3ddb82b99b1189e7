package main

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/types"

	egressv1 "github.com/egress-proxies-operator/egress-proxies-operator/api/v1alpha1"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
)

// The --inject-leak modes. Both make, through the soaked provider itself
// (the same objects or domain and volumes, the same marks), an instance
// the operator never recorded:
//
//   - behind: for the Proxy about to be deleted, under a name of a shape
//     it never had: the instance a crash between Create and the status
//     write leaves once the spec moved on. The deletion's sweep lists the
//     provider and must find it by its UID; if it does not, it outlives
//     the Proxy: LEAKED.
//   - orphan: with the UID of a Proxy that never existed, which no
//     reconcile ever looks for: the collector's job, and it never runs a
//     deleting pass here, so always LEAKED.
const (
	injectBehind = "behind"
	injectOrphan = "orphan"
)

func (s *soak) injectLeak(ctx context.Context, key types.NamespacedName) error {
	px := &egressv1.Proxy{}
	if err := s.cp.client().Get(ctx, key, px); err != nil {
		return fmt.Errorf("reading %s: %w", key.Name, err)
	}
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
	req.Name = provider.InstanceName(req.Namespace, req.ProxyName, req.UID, "soak-injected")
	id, err := s.backend.inject(ctx, req)
	if err != nil {
		return fmt.Errorf("injecting an instance for %s: %w", px.Name, err)
	}
	s.stats.add(func(st *stats) { st.injected++ })
	s.out.say("injected %s: instance %s (uid %s) behind the operator's back", s.opts.inject, id, req.UID)
	return nil
}
