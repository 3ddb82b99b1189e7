package egress

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
)

// docs/operations.md shows the registry rows as this package holds them, so
// a reader of the docs reads what the proxies enforce.
func TestOperationsDocListsTheRows(t *testing.T) {
	raw, err := os.ReadFile("../../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	const head = "| Block | What it is (RFC) | |\n|---|---|---|\n"
	doc := string(raw)
	i := strings.Index(doc, head)
	if i < 0 {
		t.Fatalf("docs/operations.md has no table starting %q", head)
	}
	table, _, _ := strings.Cut(doc[i+len(head):], "\n\n")
	got := strings.Split(table, "\n")
	var want []string
	for _, rows := range [][]specialRow{ipv4Special, ipv6Special, ipv4Embedding} {
		for _, r := range rows {
			what := "refused"
			if r.reachable {
				what = "globally reachable: cut out of the row that holds it"
			}
			want = append(want, fmt.Sprintf("| `%s` | %s (%s) | %s |", r.block, r.name, r.rfc, what))
		}
	}
	if !slices.Equal(got, want) {
		t.Errorf("docs/operations.md's table of rows differs from special.go; write:\n%s\n\nit has:\n%s", strings.Join(want, "\n"), table)
	}
}
