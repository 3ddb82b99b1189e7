package inflight

import "testing"

func TestSetRecordsUntilRemoved(t *testing.T) {
	var s Set[string]
	if _, ok := s.Get("a"); ok || len(s.Snapshot()) != 0 {
		t.Fatal("a zero Set holds something")
	}
	s.Add("a", "host-1")
	s.Add("b", "host-2")
	snap := s.Snapshot()
	s.Remove("a")
	if v, ok := s.Get("b"); !ok || v != "host-2" {
		t.Fatalf("Get(b) = %q, %v", v, ok)
	}
	if _, ok := s.Get("a"); ok {
		t.Fatal("a removed name is still there")
	}
	if len(snap) != 2 || snap["a"] != "host-1" {
		t.Fatalf("the snapshot changed with the set: %v", snap)
	}
}
