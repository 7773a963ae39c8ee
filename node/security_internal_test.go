package node

import (
	"crypto/tls"
	"log/slog"
	"strings"
	"testing"

	"github.com/shoal-dev/shoal/internal/logtest"
)

// A node without mutual TLS or without a gossip key says so at WARN, once
// per gap; one with both says nothing.
func TestWarnsOfAPlaintextTransportAndUnencryptedGossip(t *testing.T) {
	tlsCfg := &tls.Config{MinVersion: tls.VersionTLS13}
	key := make([]byte, 32)
	for _, c := range []struct {
		name string
		cfg  Config
		want []string
	}{
		{"neither", Config{}, []string{"transport is plaintext", "gossip is not encrypted"}},
		{"TLS only", Config{ServerTLS: tlsCfg, ClientTLS: tlsCfg}, []string{"gossip is not encrypted"}},
		{"gossip key only", Config{SecretKey: key}, []string{"transport is plaintext"}},
		{"both", Config{ServerTLS: tlsCfg, ClientTLS: tlsCfg, SecretKey: key}, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			var logged logtest.Buffer
			warnInsecure(slog.New(slog.NewJSONHandler(&logged, nil)), c.cfg)
			got := logged.Records(t)
			if len(got) != len(c.want) {
				t.Fatalf("%d records, want %d: %v", len(got), len(c.want), got)
			}
			for i, r := range got {
				if r["level"] != "WARN" || !strings.Contains(r["msg"].(string), c.want[i]) {
					t.Errorf("record %d: %v, want a WARN about %q", i, r, c.want[i])
				}
			}
		})
	}
}
