package fakecompute

import (
	"fmt"
	"sort"
	"unicode"
	"unicode/utf8"
)

// maxLabels is the API's limit: "Each resource can have up to 64 labels"
// (cloud.google.com/compute/docs/labeling-resources, as quoted in
// mtougeron/k8s-pvc-tagger#106).
const maxLabels = 64

// validateLabels checks labels the way GCE does: keys 1-63 characters
// starting with a lowercase letter (or an international character), keys and
// values made of lowercase letters, digits, '_' and '-' (international
// characters allowed), values at most 63 characters, at most 64 labels.
// field is 'resource.labels' on insert and 'labels' on setLabels, as the API
// names it there.
func validateLabels(field string, labels map[string]string) *APIError {
	if len(labels) > maxLabels {
		// Fake's own text in the API's frame: no source quotes this answer.
		return labelError(field, fmt.Sprintf("Too many labels: a resource can have at most %d labels.", maxLabels))
	}
	keys := make([]string, 0, len(labels))
	for k := range labels {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if !validLabelKey(k) {
			return labelError(field, fmt.Sprintf("Label key '%s' violates format constraints. The key must start "+
				"with a lowercase character, can only contain lowercase letters, numeric characters, underscores "+
				"and dashes. The key can be at most 63 characters long. International characters are allowed.", k))
		}
	}
	for _, k := range keys {
		if v := labels[k]; !validLabelValue(v) {
			return labelError(field, fmt.Sprintf("Label value '%s' violates format constraints. The value can "+
				"only contain lowercase letters, numeric characters, underscores and dashes. The value can be at "+
				"most 63 characters long. International characters are allowed.", v))
		}
	}
	return nil
}

func validLabelKey(k string) bool {
	if k == "" || utf8.RuneCountInString(k) > 63 {
		return false
	}
	first, _ := utf8.DecodeRuneInString(k)
	if !(first >= 'a' && first <= 'z') && !(first > unicode.MaxASCII && unicode.IsLetter(first) && !unicode.IsUpper(first)) {
		return false
	}
	return labelChars(k)
}

func validLabelValue(v string) bool {
	return utf8.RuneCountInString(v) <= 63 && labelChars(v)
}

func labelChars(s string) bool {
	for _, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '_', r == '-':
		case r > unicode.MaxASCII && (unicode.IsLetter(r) || unicode.IsNumber(r)) && !unicode.IsUpper(r):
		default:
			return false
		}
	}
	return true
}
