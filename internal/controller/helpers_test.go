package controller

import (
	"errors"
	"testing"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/config"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/registry"
)

func errorsIsNotFound(err error) bool { return errors.Is(err, provider.ErrNotFound) }

func mustParse(t *testing.T, yaml string, reg *registry.Registry) []config.Entry {
	t.Helper()
	es, err := config.Parse([]byte(yaml), reg.TypeNames())
	if err != nil {
		t.Fatal(err)
	}
	return es
}
