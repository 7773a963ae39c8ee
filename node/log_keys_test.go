package node_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/shoal-dev/shoal/node"
	"github.com/shoal-dev/shoal/sharding"
)

// lockedBuffer collects log lines from many goroutines.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) lines() [][]byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return bytes.Split(bytes.TrimSpace(b.buf.Bytes()), []byte("\n"))
}

// topLevelKeys lists the keys of one JSON log line, duplicates included
// (a map would hide them).
func topLevelKeys(line []byte) (map[string]json.RawMessage, []string, error) {
	dec := json.NewDecoder(bytes.NewReader(line))
	if _, err := dec.Token(); err != nil {
		return nil, nil, err
	}
	values := map[string]json.RawMessage{}
	var keys []string
	for dec.More() {
		k, err := dec.Token()
		if err != nil {
			return nil, nil, err
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, nil, err
		}
		keys = append(keys, k.(string))
		values[k.(string)] = v
	}
	return values, keys, nil
}

// Every line a node logs, from start to a graceful leave and through every
// layer (node, entity runtime, sharding, memberlist, transport, admin),
// names the node once and the same way: "node" its name, "incarnation"
// its incarnation; no key appears twice in a line.
func TestLogLinesNameTheNodeOnce(t *testing.T) {
	dsn := pg.MigratedDSN(t)
	var logs lockedBuffer
	logger := slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	withLogs := func(c *node.Config) { c.Logger = logger }
	n1 := startNodeWith(t, dsn, "node-1", nil, sharding.Settings{}, withLogs, withAdmin)
	n2 := startNodeWith(t, dsn, "node-2", []string{n1.GossipAddr()}, sharding.Settings{}, withLogs)
	awaitUp(t, []*testNode{n1, n2})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for i := range 6 {
		id := fmt.Sprintf("log-%d", i)
		if err := apply(ctx, n2.ops, id, "op-"+id); err != nil {
			t.Fatal(err)
		}
	}
	if code := adminCall(t, n1, "POST", "/admin/v1/leave", `{"node":"node-2"}`, nil); code != 202 {
		t.Fatalf("leave: %d", code)
	}
	select {
	case <-n2.Done():
	case <-ctx.Done():
		t.Fatal("node-2 did not leave")
	}
	if err := n1.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}

	incarnations := map[string]string{
		"node-1": strconv.FormatUint(n1.Self().Incarnation, 10),
		"node-2": strconv.FormatUint(n2.Self().Incarnation, 10),
	}
	named := 0
	for _, line := range logs.lines() {
		values, keys, err := topLevelKeys(line)
		if err != nil {
			t.Fatalf("log line %s: %v", line, err)
		}
		seen := map[string]bool{}
		for _, k := range keys {
			if seen[k] {
				t.Errorf("key %q twice in %s", k, line)
			}
			seen[k] = true
		}
		raw, ok := values["node"]
		if !ok {
			continue
		}
		named++
		var name string
		if err := json.Unmarshal(raw, &name); err != nil {
			t.Errorf("node %s is not a string: %s", raw, line)
			continue
		}
		want, known := incarnations[name]
		if !known {
			t.Errorf("node %q is not a node name: %s", name, line)
			continue
		}
		if got := string(values["incarnation"]); got != want {
			t.Errorf("incarnation %s beside node %q, want %s: %s", got, name, want, line)
		}
	}
	if named == 0 {
		t.Fatal("no line names its node")
	}
	if n := len(logs.lines()); n < 10 {
		t.Fatalf("only %d log lines: the test logs too little to judge", n)
	}
}
