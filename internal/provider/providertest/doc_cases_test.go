package providertest

import (
	"os"
	"strings"
	"testing"
)

// TestContractDocListsEveryCase keeps docs/provider-contract.md's list of
// conformance cases (section 4) in step with the suite: a case added to
// cases without a line in the contract is a rule nobody reads.
func TestContractDocListsEveryCase(t *testing.T) {
	raw, err := os.ReadFile("../../../docs/provider-contract.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(raw)
	start := strings.Index(doc, "## 4. Conformance")
	end := strings.Index(doc, "## 5. ")
	if start < 0 || end < start {
		t.Fatal("docs/provider-contract.md: no section 4. Conformance before section 5")
	}
	// The names a list item opens with: "- `A`" or "- `A`, `B`".
	listed := map[string]bool{}
	for _, line := range strings.Split(doc[start:end], "\n") {
		head, ok := strings.CutPrefix(line, "- `")
		if !ok {
			continue
		}
		head, _, _ = strings.Cut(head, " (")
		for _, name := range strings.Split(head, ", `") {
			listed[strings.Trim(name, "`")] = true
		}
	}
	for _, name := range CaseNames() {
		if !listed[name] {
			t.Errorf("docs/provider-contract.md section 4 has no item for the conformance case %s", name)
		}
	}
}
