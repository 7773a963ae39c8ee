package cluster_test

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/shoal-dev/shoal/cluster"
)

func TestParseUniqueAddressReversesString(t *testing.T) {
	for _, a := range []cluster.UniqueAddress{{}, {Node: "a", Incarnation: 7}, {Node: "a"}, {Node: "host#1", Incarnation: 2}, {Node: "n", Incarnation: 1<<64 - 1}} {
		s := a.String()
		got, err := cluster.ParseUniqueAddress(s)
		if err != nil || got != a {
			t.Errorf("ParseUniqueAddress(%q) = %v, %v; want %v", s, got, err, a)
		}
	}
	for _, bad := range []string{"#1", "a#", "a#x", "a#-1"} {
		if _, err := cluster.ParseUniqueAddress(bad); !errors.Is(err, cluster.ErrInvalidAddress) {
			t.Errorf("ParseUniqueAddress(%q) = %v, want ErrInvalidAddress", bad, err)
		}
	}
}

func TestUniqueAddressKeysATextMap(t *testing.T) {
	in := map[cluster.UniqueAddress][]string{{Node: "a", Incarnation: 2}: {"1"}, {Node: "b", Incarnation: 3}: {"2", "3"}}
	b, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	var out map[cluster.UniqueAddress][]string
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	if len(out) != 2 || len(out[cluster.UniqueAddress{Node: "b", Incarnation: 3}]) != 2 {
		t.Fatalf("round trip of %s = %v", b, out)
	}
	if err := json.Unmarshal([]byte(`{"a#x":["1"]}`), &out); !errors.Is(err, cluster.ErrInvalidAddress) {
		t.Fatalf("decoding a key with a bad incarnation: %v, want ErrInvalidAddress", err)
	}
}
