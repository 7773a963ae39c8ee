package memberlist_test

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/shoal-dev/shoal/cluster"
	"github.com/shoal-dev/shoal/cluster/memberlist"
)

func sampleMeta() memberlist.Meta {
	return memberlist.Meta{
		Address:  cluster.UniqueAddress{Node: "node-1", Incarnation: 1732345678901234567},
		Endpoint: "10.0.0.7:7355", Roles: []string{"shard", "web"}, AppVersion: "2.3.1",
		JoinOrder: 42, Leaving: true,
	}
}

func TestMetaRoundTrips(t *testing.T) {
	for _, m := range []memberlist.Meta{
		sampleMeta(),
		{Address: cluster.UniqueAddress{Node: "n", Incarnation: 1}},
		{Address: cluster.UniqueAddress{Node: "n", Incarnation: 1}, JoinOrder: ^uint64(0)},
	} {
		b, err := m.Encode()
		if err != nil {
			t.Fatalf("Encode(%+v): %v", m, err)
		}
		got, err := memberlist.DecodeMeta(b)
		if err != nil {
			t.Fatalf("DecodeMeta: %v", err)
		}
		if !reflect.DeepEqual(got, m) {
			t.Errorf("round trip: got %+v, want %+v", got, m)
		}
	}
}

func TestMetaStatus(t *testing.T) {
	m := memberlist.Meta{Address: cluster.UniqueAddress{Node: "n", Incarnation: 1}}
	for _, c := range []struct {
		order   uint64
		leaving bool
		want    cluster.Status
	}{{0, false, cluster.Joining}, {3, false, cluster.Up}, {3, true, cluster.Leaving}} {
		m.JoinOrder, m.Leaving = c.order, c.leaving
		if got := m.Member().Status; got != c.want {
			t.Errorf("order %d leaving %v: status %s, want %s", c.order, c.leaving, got, c.want)
		}
	}
}

func TestMetaIsCompact(t *testing.T) {
	b, err := sampleMeta().Encode()
	if err != nil {
		t.Fatal(err)
	}
	// 2 header bytes, 9+1 varints, 7+14+6+1+6+4 string bytes with lengths.
	if len(b) > 64 {
		t.Errorf("sample metadata takes %d bytes, want ≤ 64", len(b))
	}
}

func TestMetaTooLargeIsATypedError(t *testing.T) {
	m := sampleMeta()
	for i := 0; ; i++ {
		m.Roles = append(m.Roles, fmt.Sprintf("role-with-a-long-name-%03d", i))
		b, err := m.Encode()
		if err != nil {
			if !errors.Is(err, memberlist.ErrMetaTooLarge) {
				t.Fatalf("Encode = %v, want ErrMetaTooLarge", err)
			}
			if i == 0 {
				t.Fatal("refused with almost no roles")
			}
			return
		}
		if len(b) > memberlist.MetaMaxSize {
			t.Fatalf("Encode returned %d bytes, over the limit %d", len(b), memberlist.MetaMaxSize)
		}
	}
}

func TestNewRefusesRolesThatWouldOverflowTheMetadata(t *testing.T) {
	roles := make([]string, 40)
	for i := range roles {
		roles[i] = strings.Repeat("r", 10) + fmt.Sprint(i)
	}
	_, err := memberlist.New(memberlist.Config{NodeID: "a", Incarnation: 1, Roles: roles, Logger: quiet})
	if !errors.Is(err, memberlist.ErrMetaTooLarge) {
		t.Fatalf("New with %d roles = %v, want ErrMetaTooLarge", len(roles), err)
	}
}

func TestDecodeMetaRefusesCorruptInput(t *testing.T) {
	good, err := sampleMeta().Encode()
	if err != nil {
		t.Fatal(err)
	}
	cases := map[string][]byte{
		"empty":          nil,
		"version 0":      append([]byte{0}, good[1:]...),
		"truncated":      good[:len(good)-1],
		"trailing bytes": append(append([]byte(nil), good...), 0),
		"string too long": func() []byte {
			b := append([]byte(nil), good[:2]...)
			return append(b, 1, 1, 200, 'x') // incarnation 1, order 1, node id of 200 bytes
		}(),
		"up flag without order": {1, 1, 1, 0, 1, 'n', 0, 0, 0},
		"huge role count":       {1, 0, 1, 0, 1, 'n', 0, 0, 0xff, 0xff, 0x03},
		"empty node id":         {1, 0, 1, 0, 0, 0, 0, 0},
	}
	for name, b := range cases {
		if _, err := memberlist.DecodeMeta(b); !errors.Is(err, memberlist.ErrInvalidMeta) {
			t.Errorf("%s: DecodeMeta = %v, want ErrInvalidMeta", name, err)
		}
	}
}

func TestDecodeMetaReadsALaterVersionItsOwnWay(t *testing.T) {
	m := sampleMeta()
	b, err := m.Encode()
	if err != nil {
		t.Fatal(err)
	}
	// A later version appends fields; this reader skips them.
	later := append([]byte{2}, b[1:]...)
	later = append(later, 0xde, 0xad)
	got, err := memberlist.DecodeMeta(later)
	if err != nil {
		t.Fatalf("DecodeMeta(version 2) = %v", err)
	}
	if !reflect.DeepEqual(got, m) {
		t.Errorf("got %+v, want %+v", got, m)
	}
}

func TestNewRefusesBadConfig(t *testing.T) {
	fast := memberlist.FastTiming()
	bad := map[string]memberlist.Config{
		"no node id":      {},
		"slash in id":     {NodeID: "a/b"},
		"short key":       {NodeID: "a", SecretKey: []byte("short")},
		"long label":      {NodeID: "a", ClusterName: strings.Repeat("x", 256)},
		"zero probe":      {NodeID: "a", Timing: func() memberlist.Timing { t := fast; t.ProbeInterval = 0; return t }()},
		"timeout ≥ probe": {NodeID: "a", Timing: func() memberlist.Timing { t := fast; t.ProbeTimeout = t.ProbeInterval; return t }()},
		"no gossip nodes": {NodeID: "a", Timing: func() memberlist.Timing { t := fast; t.GossipNodes = 0; return t }()},
	}
	for name, cfg := range bad {
		cfg.Logger = quiet
		if _, err := memberlist.New(cfg); !errors.Is(err, cluster.ErrInvalidConfig) {
			t.Errorf("%s: New = %v, want ErrInvalidConfig", name, err)
		}
	}
}

// FuzzDecodeMeta feeds the node metadata decoder (what every node reads
// from gossip) arbitrary bytes: it never panics, refuses with
// ErrInvalidMeta only, and metadata it accepts encodes again and decodes
// to the same.
func FuzzDecodeMeta(f *testing.F) {
	for _, m := range []memberlist.Meta{sampleMeta(), {Address: cluster.UniqueAddress{Node: "n", Incarnation: 1}}} {
		b, err := m.Encode()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
		f.Add(append(b, 7)) // a field of a later version
	}
	f.Add([]byte{1})
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := memberlist.DecodeMeta(b)
		if err != nil {
			if !errors.Is(err, memberlist.ErrInvalidMeta) {
				t.Fatalf("untyped error: %v", err)
			}
			return
		}
		again, err := m.Encode()
		if err != nil {
			t.Fatalf("decoded %+v does not encode: %v", m, err)
		}
		back, err := memberlist.DecodeMeta(again)
		if err != nil || !reflect.DeepEqual(back, m) {
			t.Fatalf("re-encoded %+v decodes as %+v, %v", m, back, err)
		}
	})
}
