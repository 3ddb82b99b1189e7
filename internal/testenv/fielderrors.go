package testenv

import (
	"errors"
	"fmt"
	"strings"

	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// FieldPathed says why err is neither an error about the whole file (its
// text starts with one of fileErrors) nor an aggregate of field errors each
// naming a path under prefix; "" when it is one of those. The fuzzers of
// the config decoders hold every refusal to it: a user must be told which
// field is wrong.
func FieldPathed(err error, prefix string, fileErrors ...string) string {
	for _, w := range fileErrors {
		if strings.HasPrefix(err.Error(), w) {
			return ""
		}
	}
	var agg utilerrors.Aggregate
	if !errors.As(err, &agg) || len(agg.Errors()) == 0 {
		return fmt.Sprintf("error %q (%T) is neither about the file nor a list of field errors", err, err)
	}
	for _, e := range agg.Errors() {
		var fe *field.Error
		if !errors.As(e, &fe) || fe.Field == "" || !strings.HasPrefix(fe.Field, prefix) {
			return fmt.Sprintf("error %q names no field path under %q", e, prefix)
		}
	}
	return ""
}
