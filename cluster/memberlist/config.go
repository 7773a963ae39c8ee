package memberlist

import (
	"context"
	"fmt"
	"log"
	"log/slog"
	"strings"
	"time"

	ml "github.com/hashicorp/memberlist"

	"github.com/shoal-dev/shoal/cluster"
)

// ErrInvalidConfig is returned (wrapped) by New for a Config it cannot use.
// It is cluster.ErrInvalidConfig.
var ErrInvalidConfig = cluster.ErrInvalidConfig

// Config configures one node's membership. NodeID is required; the rest
// has defaults.
type Config struct {
	// NodeID names the node across restarts; it must not contain '/'.
	NodeID string
	// Incarnation grows with every restart of NodeID. Default: the wall
	// clock in nanoseconds at New, which grows as long as the clock does
	// (a node lease in Postgres is the authority that refuses an older one).
	Incarnation uint64
	// Endpoint is where this node's message transport listens; peers read
	// it from the metadata.
	Endpoint string
	// Roles this node carries.
	Roles []string
	// AppVersion is the application version, for rolling updates.
	AppVersion string

	// BindAddr and BindPort are where gossip listens (UDP and TCP).
	// Default 127.0.0.1 (set a reachable address for a multi-host
	// cluster); port 0 picks a free port, which Addr reports.
	BindAddr string
	BindPort int
	// AdvertiseAddr and AdvertisePort, when set, are the address peers are
	// told to use instead of the bound one (behind NAT, in containers).
	AdvertiseAddr string
	AdvertisePort int
	// Transport replaces the UDP/TCP sockets (BindAddr and BindPort are
	// then ignored); see package faultnet for tests.
	Transport ml.Transport

	// ClusterName isolates clusters: gossip from a node with another name
	// is refused (memberlist's label, at most 255 bytes).
	ClusterName string
	// SecretKey, when set, encrypts gossip with AES-GCM; 16, 24 or 32
	// bytes. A node without the key cannot join.
	SecretKey []byte
	// Keyring holds the keys for rotation (AddKey, UseKey, RemoveKey): the
	// primary key encrypts, all keys decrypt. SecretKey, if also set, is
	// added and made primary.
	Keyring *ml.Keyring

	// Admit, when set, decides whether a member that gossip reports may
	// enter this node's views: until it returns nil for the member, the
	// member is in no view (not Joining, not Up), and it is asked again,
	// with back-off up to Timing.ReconnectInterval, for as long as the
	// member is alive. Gossip authenticates nobody (the cluster name is a
	// label, the key optional), so package node passes its transport's
	// check: a handshake with the member's endpoint, which fails for a
	// process the transport would refuse (docs/DESIGN.md, "Members and
	// views"). Each refusal is logged once per member. It runs on a
	// goroutine of its own, with a context that ends at Shutdown.
	Admit func(ctx context.Context, m cluster.Member) error

	// Timing holds failure detection and gossip settings. Left zero it is
	// DefaultTiming(); otherwise every field must be set, so start from
	// DefaultTiming() or FastTiming() and change what you need.
	Timing Timing
	// Logger receives memberlist's log lines at their levels. Default
	// slog.Default().
	Logger *slog.Logger
}

// Timing is failure detection, gossip and reconnection. DefaultTiming is
// memberlist's LAN configuration, LocalTiming its local-network one;
// FastTiming is for tests. CutSpread tells how long a partition may be
// seen only in part with it.
type Timing struct {
	// ProbeInterval is how often one random peer is probed.
	ProbeInterval time.Duration
	// ProbeTimeout is how long a probe waits for its ack before asking
	// IndirectChecks others to probe too.
	ProbeTimeout time.Duration
	// IndirectChecks is how many peers probe on our behalf.
	IndirectChecks int
	// SuspicionMult scales the suspicion timeout: a suspect is declared
	// failed after SuspicionMult × max(1, log10 N) × ProbeInterval with
	// enough confirmations, up to SuspicionMaxTimeoutMult times that without.
	SuspicionMult           int
	SuspicionMaxTimeoutMult int
	// GossipInterval, GossipNodes: every interval, gossip to that many peers.
	GossipInterval time.Duration
	GossipNodes    int
	// GossipToTheDeadTime is how long failed peers still get gossip (so a
	// falsely accused node learns of it and refutes).
	GossipToTheDeadTime time.Duration
	// RetransmitMult scales how often each broadcast is retransmitted.
	RetransmitMult int
	// PushPullInterval is how often a full state exchange runs with one peer.
	PushPullInterval time.Duration
	// TCPTimeout bounds stream operations: joins, push/pull, TCP probes.
	TCPTimeout time.Duration
	// BroadcastTimeout bounds the wait for a metadata change (join order,
	// Leaving) or a leave to go out when the context has no deadline.
	BroadcastTimeout time.Duration

	// ReconnectInterval is how often this node tries to rejoin failed
	// peers, which heals a partition that outlasted GossipToTheDeadTime.
	ReconnectInterval time.Duration
	// ReconnectTimeout is how long a failed peer stays Unreachable before
	// this node's view marks it Down for good.
	ReconnectTimeout time.Duration
	// RemoveDownAfter is how long a Down member stays in the view (so
	// subscribers see MemberDowned) before it is removed.
	RemoveDownAfter time.Duration
}

// DefaultTiming is memberlist's LAN configuration (DefaultLANConfig):
// probe every 1 s with a 500 ms timeout, 3 indirect checks, suspicion
// multiplier 4 (a failed node is declared after about 4 s in a cluster of
// 3, 4–24 s beyond, depending on confirmations), gossip to 3 nodes every
// 200 ms, push/pull every 30 s, TCP timeout 10 s. Reconnection: every
// 10 s, giving up after 5 min; Down members leave the view after 1 min.
func DefaultTiming() Timing { return timingOf(ml.DefaultLANConfig()) }

// LocalTiming is memberlist's local-network configuration
// (DefaultLocalConfig): probe every 1 s with a 200 ms timeout, 1 indirect
// check, suspicion multiplier 3, gossip every 100 ms, push/pull every
// 15 s, TCP timeout 1 s; reconnection as DefaultTiming.
func LocalTiming() Timing { return timingOf(ml.DefaultLocalConfig()) }

func timingOf(c *ml.Config) Timing {
	return Timing{
		ProbeInterval: c.ProbeInterval, ProbeTimeout: c.ProbeTimeout, IndirectChecks: c.IndirectChecks,
		SuspicionMult: c.SuspicionMult, SuspicionMaxTimeoutMult: c.SuspicionMaxTimeoutMult,
		GossipInterval: c.GossipInterval, GossipNodes: c.GossipNodes, GossipToTheDeadTime: c.GossipToTheDeadTime,
		RetransmitMult: c.RetransmitMult, PushPullInterval: c.PushPullInterval, TCPTimeout: c.TCPTimeout,
		BroadcastTimeout:  5 * time.Second,
		ReconnectInterval: 10 * time.Second,
		ReconnectTimeout:  5 * time.Minute,
		RemoveDownAfter:   time.Minute,
	}
}

// FastTiming detects a failure in about a second: for tests on the fake
// clock of testing/synctest, or on an idle loopback. On a busy machine's
// real clock it risks false failures (which heal, but churn).
func FastTiming() Timing {
	return Timing{
		ProbeInterval: 100 * time.Millisecond, ProbeTimeout: 50 * time.Millisecond, IndirectChecks: 1,
		SuspicionMult: 2, SuspicionMaxTimeoutMult: 3,
		GossipInterval: 20 * time.Millisecond, GossipNodes: 3, GossipToTheDeadTime: time.Second,
		RetransmitMult: 4, PushPullInterval: time.Second, TCPTimeout: 500 * time.Millisecond,
		BroadcastTimeout:  time.Second,
		ReconnectInterval: 200 * time.Millisecond,
		ReconnectTimeout:  5 * time.Second,
		RemoveDownAfter:   time.Second,
	}
}

func (t Timing) validate() error {
	for name, d := range map[string]time.Duration{
		"ProbeInterval": t.ProbeInterval, "ProbeTimeout": t.ProbeTimeout, "GossipInterval": t.GossipInterval,
		"GossipToTheDeadTime": t.GossipToTheDeadTime, "PushPullInterval": t.PushPullInterval,
		"TCPTimeout": t.TCPTimeout, "BroadcastTimeout": t.BroadcastTimeout, "ReconnectInterval": t.ReconnectInterval,
		"ReconnectTimeout": t.ReconnectTimeout, "RemoveDownAfter": t.RemoveDownAfter,
	} {
		if d <= 0 {
			return fmt.Errorf("%w: Timing.%s is %s, must be positive", ErrInvalidConfig, name, d)
		}
	}
	for name, n := range map[string]int{
		"IndirectChecks": t.IndirectChecks, "SuspicionMult": t.SuspicionMult,
		"SuspicionMaxTimeoutMult": t.SuspicionMaxTimeoutMult, "GossipNodes": t.GossipNodes,
		"RetransmitMult": t.RetransmitMult,
	} {
		if n <= 0 {
			return fmt.Errorf("%w: Timing.%s is %d, must be positive", ErrInvalidConfig, name, n)
		}
	}
	if t.ProbeTimeout >= t.ProbeInterval {
		return fmt.Errorf("%w: Timing.ProbeTimeout %s must be shorter than ProbeInterval %s", ErrInvalidConfig, t.ProbeTimeout, t.ProbeInterval)
	}
	return nil
}

// withDefaults fills what is unset and checks the rest, including that the
// metadata fits MetaMaxSize with the largest join order it may carry.
func (c Config) withDefaults(now time.Time) (Config, error) {
	if c.NodeID == "" || strings.Contains(c.NodeID, "/") {
		return c, fmt.Errorf("%w: NodeID %q (required, no '/')", ErrInvalidConfig, c.NodeID)
	}
	if c.Incarnation == 0 {
		c.Incarnation = uint64(now.UnixNano())
	}
	if c.BindAddr == "" {
		c.BindAddr = "127.0.0.1"
	}
	if c.Timing == (Timing{}) {
		c.Timing = DefaultTiming()
	}
	if err := c.Timing.validate(); err != nil {
		return c, err
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if len(c.ClusterName) > ml.LabelMaxSize {
		return c, fmt.Errorf("%w: ClusterName of %d bytes, limit %d", ErrInvalidConfig, len(c.ClusterName), ml.LabelMaxSize)
	}
	if n := len(c.SecretKey); n != 0 && n != 16 && n != 24 && n != 32 {
		return c, fmt.Errorf("%w: SecretKey of %d bytes, want 16, 24 or 32", ErrInvalidConfig, n)
	}
	c.Roles = append([]string(nil), c.Roles...)
	// The largest metadata this incarnation will ever send: every flag set
	// and the longest join order.
	if _, err := c.meta(^uint64(0), true).Encode(); err != nil {
		return c, err
	}
	return c, nil
}

func (c Config) self() cluster.UniqueAddress {
	return cluster.UniqueAddress{Node: c.NodeID, Incarnation: c.Incarnation}
}

func (c Config) meta(joinOrder uint64, leaving bool) Meta {
	return Meta{Address: c.self(), Endpoint: c.Endpoint, Roles: c.Roles, AppVersion: c.AppVersion, JoinOrder: joinOrder, Leaving: leaving}
}

// memberlistConfig translates c for memberlist.
func (c Config) memberlistConfig(logs *logWriter) *ml.Config {
	mc := ml.DefaultLANConfig()
	mc.Name = nodeName(c.self())
	mc.BindAddr, mc.BindPort = c.BindAddr, c.BindPort
	mc.AdvertiseAddr, mc.AdvertisePort = c.AdvertiseAddr, c.AdvertisePort
	mc.Transport = c.Transport
	mc.Label = c.ClusterName
	mc.SecretKey = c.SecretKey
	mc.Keyring = c.Keyring
	t := c.Timing
	mc.ProbeInterval, mc.ProbeTimeout, mc.IndirectChecks = t.ProbeInterval, t.ProbeTimeout, t.IndirectChecks
	mc.SuspicionMult, mc.SuspicionMaxTimeoutMult = t.SuspicionMult, t.SuspicionMaxTimeoutMult
	mc.GossipInterval, mc.GossipNodes, mc.GossipToTheDeadTime = t.GossipInterval, t.GossipNodes, t.GossipToTheDeadTime
	mc.RetransmitMult, mc.PushPullInterval, mc.TCPTimeout = t.RetransmitMult, t.PushPullInterval, t.TCPTimeout
	mc.Logger = log.New(logs, "", 0)
	return mc
}
