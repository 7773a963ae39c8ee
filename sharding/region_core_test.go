package sharding

import (
	"flag"
	"fmt"
	"github.com/shoal-dev/shoal/cluster"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/shoal-dev/shoal/internal/scenario"
	"github.com/shoal-dev/shoal/sharding/internal/protocol"
)

// Scenario files in testdata/region/*.txt step a regionCore, a region's
// routing, through its inputs and print the effects it asks for, in the
// format of testdata/shard (see TestShardCoreScenarios). Run with
// -rewrite-region to regenerate the expected output (then review the diff).
//
// The harness plays the runner: it names each hosting of a shard SHARD#N,
// and checks on every tell that the runner's read-locked fast path
// (routable) agrees with the core's decision.
//
// Commands:
//
//	config [self=NODE] [proxy=B] [buffer-size=N] [tick=D] [idle-ticks=N] [wait-ticks=N]
//	                     a new core (defaults: a, false, 100000, 2s, 0 = no idle passivation,
//	                     0 = wait for hand-overs and fences for ever)
//	members OLDEST [live=NODE,...]
//	                     a new membership view whose coordinator is on OLDEST ("-": none),
//	                     with the nodes listed (default: OLDEST and self)
//	tell SHARD ENTITY MSG
//	                     a message for ENTITY, of SHARD, through this region
//	start SHARD ENTITY   StartEntity
//	recv MESSAGE ARGS    a protocol message from the coordinator or a region:
//	  register-ack COORD epoch=E
//	  homes epoch=E [NODE=SHARD,SHARD...]...
//	  home SHARD NODE epoch=E   (NODE "-": the shard has no home)
//	  host SHARD epoch=E [from=NODE]
//	  hand-over SHARD from=NODE [seq=N] [relayed=B] [msgs=ENTITY:MSG,...]
//	                     (the previous home's mail; relayed: news that it reached a later home)
//	  begin-hand-off SHARD epoch=E
//	  hand-off SHARD epoch=E [fences=NODE,...] [mail-held-by=NODE]
//	                     (mail-held-by: the coordinator names the region whose mail
//	                     the home awaits, "-" for none; absent: an older coordinator's)
//	  fence SHARD from=NODE
//	  leave-ack epoch=E
//	  flush from=NODE seq=N      (NODE's marker behind what it forwarded here)
//	  flush-ack NODE seq=N       (NODE has what this region forwarded before its Flush N)
//	  started SHARD NODE [seq=N]   (NODE has the mail this region handed over; no seq: any)
//	  deliver SHARD ENTITY MSG   (forwarded by another region)
//	handed-off SHARD [leftover=ENTITY:MSG,...]
//	                     the local shard's entities all stopped
//	unreachable SHARD NODE
//	                     the transport could not carry a message to NODE, SHARD's home
//	down NODE            from now on the transport refuses to carry forwards and this
//	                     region's HandOvers and Flushes to NODE: the harness puts each
//	                     forward back as the runner does (unreachable, route), and
//	                     reports each HandOver (handOverRefused) and Flush (flushRefused)
//	terminated SHARD     the entities of a shard stop terminated have all stopped
//	tick                 the retry tick
//	leave OLDEST         begin a graceful leave
//	stop                 end it (Shutdown, after the leave or its deadline)
//	terminate            stop at once, as a crash
//	state                print every shard's entry and the region's flags
var rewriteRegion = flag.Bool("rewrite-region", false, "rewrite the expected output of testdata/region/*.txt")

func TestRegionCoreScenarios(t *testing.T) {
	scenario.RunDir(t, "testdata/region/*.txt", *rewriteRegion, func(t *testing.T) scenario.RunFunc {
		h := &regionHarness{scenarioBase: scenarioBase{t: t}}
		return h.runAt(h.run)
	})
}

// regionHarness runs a regionCore as the real runner would, minus the IO.
type regionHarness struct {
	scenarioBase
	core    *regionCore[string, string]
	hosting map[string]int  // shard → hostings so far
	down    map[string]bool // nodes forwards cannot reach
}

func (h *regionHarness) configure(kv map[string]string) {
	cfg := regionCoreConfig{self: addr("a"), bufferSize: 100_000, tickInterval: 2 * time.Second}
	for k, v := range kv {
		var err error
		switch k {
		case "self":
			cfg.self = addr(v)
		case "proxy":
			cfg.proxy, err = strconv.ParseBool(v)
		case "buffer-size":
			cfg.bufferSize, err = strconv.Atoi(v)
		case "tick":
			cfg.tickInterval, err = time.ParseDuration(v)
		case "register-retry":
			cfg.registerRetry, err = time.ParseDuration(v)
		case "idle-ticks":
			cfg.idleTicks, err = strconv.ParseUint(v, 10, 64)
		case "wait-ticks":
			cfg.waitTicks, err = strconv.ParseUint(v, 10, 64)
		default:
			h.fatalf("unknown config key %q", k)
		}
		if err != nil {
			h.fatalf("%s=%q: %v", k, v, err)
		}
	}
	h.core = newRegionCore[string, string](cfg)
	h.hosting, h.down = map[string]int{}, map[string]bool{}
}

func (h *regionHarness) run(line string) string {
	c := h.begin(line, h.core != nil)
	cmd, pos, kv := c.Name, c.Pos, c.KV
	need := func(n int) { h.need(c, n) }
	switch cmd {
	case "config":
		h.configure(kv)
	case "members":
		need(1)
		live := []string{addrName(h.core.cfg.self)}
		if o := addr(pos[0]); !o.IsZero() {
			live = append(live, addrName(o))
		}
		if l, ok := kv["live"]; ok {
			live = strings.Split(l, ",")
		}
		h.core.membership(addr(pos[0]), addrs(live...))
	case "tell", "start":
		var p pending[string]
		if cmd == "tell" {
			need(3)
			p = pending[string]{entityID: pos[1], msg: pos[2]}
		} else {
			need(2)
			p = pending[string]{entityID: pos[1], start: true}
		}
		h.tell(pos[0], p)
	case "recv":
		need(1)
		h.core.step(h.message(pos[0], pos[1:], kv))
	case "handed-off":
		need(1)
		h.core.handedOff(pos[0], h.pendings(pos[0], kv["leftover"]))
	case "unreachable":
		need(2)
		h.core.unreachable(pos[0], addr(pos[1]))
	case "terminated":
		need(1)
		h.core.shardTerminated(pos[0])
	case "down":
		need(1)
		h.down[pos[0]] = true
	case "tick":
		h.core.tick()
	case "register-retry":
		need(1)
		gen, err := strconv.ParseUint(pos[0], 10, 64)
		if err != nil {
			h.fatalf("register-retry %q: %v", pos[0], err)
		}
		h.core.retryRegister(gen)
	case "leave":
		need(1)
		h.core.leave(addr(pos[0]))
	case "stop":
		h.core.stop()
	case "terminate":
		h.core.terminate()
	case "state":
		h.printState()
	default:
		h.fatalf("unknown command %q", cmd)
	}
	h.apply()
	return strings.Join(h.out, "\n")
}

// tell routes p as the runner does: the fast path when routable, else
// the core decides under the write lock; both must agree, but that a
// leaving region forwards only through the core (see routable).
func (h *regionHarness) tell(shardID string, p pending[string]) {
	fast := h.core.routable(shardID)
	leaving := h.core.leaving
	verdict, e := h.core.route(shardID, p)
	direct := verdict == routeLocal || verdict == routeRemote && !leaving
	if (fast != nil) != direct || fast != nil && fast != e {
		h.fatalf("fast path %v disagrees with the core's verdict %d", fast != nil, verdict)
	}
	h.apply()
	switch verdict {
	case routeLocal:
		h.printf("deliver %s: %s", e.local, fmtPending(p))
	case routeRemote:
		h.printf("forward to %s: %s %s", e.home, shardID, fmtPending(p))
	case routeHeld:
		h.printf("held")
	case routeStopped:
		h.printf("refused: region stopped")
	case routeFull:
		h.printf("refused: buffer full")
	}
}

func (h *regionHarness) epoch(kv map[string]string) uint64 {
	e, err := strconv.ParseUint(kv["epoch"], 10, 64)
	if err != nil {
		h.fatalf("epoch=%q: %v", kv["epoch"], err)
	}
	return e
}

// uint is an optional number argument: 0 when absent.
func (h *regionHarness) uint(v string) uint64 {
	if v == "" {
		return 0
	}
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		h.fatalf("%q: %v", v, err)
	}
	return n
}

// message builds the protocol message of a recv command.
func (h *regionHarness) message(name string, pos []string, kv map[string]string) Message {
	need := func(n int) {
		if len(pos) < n {
			h.fatalf("recv %s needs %d arguments", name, n)
		}
	}
	switch name {
	case "register-ack":
		need(1)
		return protocol.RegisterAck{Coordinator: addr(pos[0]), Epoch: h.epoch(kv)}
	case "homes":
		homes := map[cluster.UniqueAddress][]string{}
		for k, v := range kv {
			if k != "epoch" && k != "coordinator" {
				homes[addr(k)] = strings.Split(v, ",")
			}
		}
		m := protocol.ShardHomes{Homes: homes, Epoch: h.epoch(kv)}
		if c := kv["coordinator"]; c != "" {
			m.Coordinator = addr(c)
		}
		return m
	case "home":
		need(2)
		return protocol.ShardHome{Shard: pos[0], Region: addr(pos[1]), From: addr(kv["from"]), Epoch: h.epoch(kv)}
	case "host":
		need(1)
		return protocol.HostShard{Shard: pos[0], From: addr(kv["from"]), Epoch: h.epoch(kv)}
	case "hand-over":
		need(1)
		var ds []protocol.Deliver
		for _, p := range h.pendings(pos[0], kv["msgs"]) {
			ds = append(ds, p.deliver(pos[0]))
		}
		return protocol.HandOver{Shard: pos[0], From: addr(kv["from"]), Seq: h.uint(kv["seq"]), Relayed: kv["relayed"] == "true", Msgs: ds}
	case "begin-hand-off":
		need(1)
		return protocol.BeginHandOff{Shard: pos[0], Epoch: h.epoch(kv), Seq: h.uint(kv["seq"])}
	case "hand-off":
		need(1)
		var fences []string
		if f := kv["fences"]; f != "" {
			fences = strings.Split(f, ",")
		}
		m := protocol.HandOff{Shard: pos[0], Epoch: h.epoch(kv), Seq: h.uint(kv["seq"]), Fences: addrs(fences...)}
		if v, ok := kv["mail-held-by"]; ok {
			m.MailHeldBy, m.MailHeldByKnown = addr(v), true
		}
		return m
	case "fence":
		need(1)
		return protocol.Fence{Shard: pos[0], From: addr(kv["from"]), Epoch: h.uint(kv["epoch"]), Seq: h.uint(kv["seq"])}
	case "leave-ack":
		return protocol.LeaveAck{Epoch: h.epoch(kv)}
	case "flush":
		return protocol.Flush{From: addr(kv["from"]), Seq: h.uint(kv["seq"])}
	case "flush-ack":
		need(1)
		return protocol.FlushAck{Region: addr(pos[0]), Seq: h.uint(kv["seq"])}
	case "started":
		need(2)
		return protocol.ShardStarted{Shard: pos[0], Region: addr(pos[1]), Seq: h.uint(kv["seq"])}
	case "deliver":
		need(3)
		return protocol.Deliver{Shard: pos[0], EntityID: pos[1], Msg: pos[2]}
	case "members-down":
		return protocol.MembersDown{Nodes: addrs(strings.Split(kv["nodes"], ",")...)}
	}
	h.fatalf("unknown message %q", name)
	return nil
}

// pendings parses ENTITY:MSG,... ("ENTITY:start" for StartEntity).
func (h *regionHarness) pendings(shardID, list string) []pending[string] {
	if list == "" {
		return nil
	}
	var out []pending[string]
	for _, item := range strings.Split(list, ",") {
		id, msg, ok := strings.Cut(item, ":")
		if !ok {
			h.fatalf("%q: want ENTITY:MSG", item)
		}
		out = append(out, pending[string]{entityID: id, msg: msg, start: msg == "start"})
	}
	return out
}

func fmtPending(p pending[string]) string {
	if p.start {
		return p.entityID + " start"
	}
	return p.entityID + " " + p.msg
}

func fmtDelivers(ds []protocol.Deliver) string {
	if len(ds) == 0 {
		return "nothing"
	}
	parts := make([]string, len(ds))
	for i, d := range ds {
		if d.Start {
			parts[i] = d.EntityID + " start"
		} else {
			parts[i] = fmt.Sprintf("%s %v", d.EntityID, d.Msg)
		}
	}
	return strings.Join(parts, ", ")
}

// fmtMessage prints a protocol message a region sends.
func fmtMessage(m Message) string {
	switch m := m.(type) {
	case protocol.Register:
		return "Register " + addrName(m.Region)
	case protocol.RegisterProxy:
		return "RegisterProxy " + addrName(m.Region)
	case protocol.GetShardHome:
		if m.HandOver {
			return "GetShardHome " + m.Shard + " (holding its mail)"
		}
		return "GetShardHome " + m.Shard
	case protocol.ShardStarted:
		if m.Seq != 0 {
			return fmt.Sprintf("ShardStarted %s (hand-over %d)", m.Shard, m.Seq)
		}
		return "ShardStarted " + m.Shard
	case protocol.BeginHandOffAck:
		if !m.FencedAt.IsZero() {
			return "BeginHandOffAck " + m.Shard + " (fenced at " + addrName(m.FencedAt) + ")" + handOffID(m.Epoch, m.Seq)
		}
		return "BeginHandOffAck " + m.Shard + handOffID(m.Epoch, m.Seq)
	case protocol.Fence:
		return "Fence " + m.Shard + " from " + addrName(m.From) + handOffID(m.Epoch, m.Seq)
	case protocol.ShardStopped:
		if m.Held {
			return "ShardStopped " + m.Shard + ", holding its mail" + handOffID(m.Epoch, m.Seq)
		}
		return "ShardStopped " + m.Shard + handOffID(m.Epoch, m.Seq)
	case protocol.HandOver:
		if m.Relayed {
			return fmt.Sprintf("HandOver %s of %s (%d) relayed", m.Shard, m.From, m.Seq)
		}
		return fmt.Sprintf("HandOver %s #%d: %s", m.Shard, m.Seq, fmtDelivers(m.Msgs))
	case protocol.Flush:
		return fmt.Sprintf("Flush #%d from %s", m.Seq, addrName(m.From))
	case protocol.FlushAck:
		return fmt.Sprintf("FlushAck #%d from %s", m.Seq, addrName(m.Region))
	case protocol.GracefulShutdownReq:
		return "GracefulShutdownReq " + addrName(m.Region)
	case protocol.RegionStopped:
		return "RegionStopped " + addrName(m.Region)
	case protocol.StopShards:
		return "StopShards " + strings.Join(m.Shards, ",")
	}
	return fmt.Sprintf("%T %+v", m, m)
}

// handOffID prints the hand-off a message belongs to, when the scenario
// numbered it (seq=).
func handOffID(epoch, seq uint64) string {
	if seq == 0 {
		return ""
	}
	return fmt.Sprintf(" [hand-off %d.%d]", epoch, seq)
}

// apply carries out and prints the core's effects, as the runner would.
func (h *regionHarness) apply() {
	for len(h.core.out) > 0 {
		out := h.core.out
		h.core.out = nil
		for _, ef := range out {
			switch ef.kind {
			case regSend:
				to := addrName(ef.node)
				if ef.coordinator {
					to += "/coordinator"
				}
				if m, ok := ef.msg.(protocol.HandOver); ok && ef.handOver && h.down[addrName(ef.node)] {
					h.core.handOverRefused(m.Shard, ef.node, m.Seq)
					h.printf("send %s refused: %s", to, fmtMessage(ef.msg))
					break
				}
				if _, ok := ef.msg.(protocol.Flush); ok && h.down[addrName(ef.node)] {
					h.printf("send %s refused: %s", to, fmtMessage(ef.msg))
					h.core.flushRefused(ef.node)
					break
				}
				h.printf("send %s: %s", to, fmtMessage(ef.msg))
			case regForward:
				if !h.down[addrName(ef.node)] {
					h.printf("forward to %s: %s %s", ef.node, ef.shard, fmtPending(ef.p))
					break
				}
				// As the runner: accepted before, it waits again.
				h.core.unreachable(ef.shard, ef.node)
				v, _ := h.core.route(ef.shard, ef.p)
				again := "held"
				if v != routeHeld {
					again = fmt.Sprintf("verdict %d", v)
				}
				h.printf("forward to %s failed: %s %s, %s again", ef.node, ef.shard, fmtPending(ef.p), again)
			case regHost:
				h.hosting[ef.shard]++
				handle := fmt.Sprintf("%s#%d", ef.shard, h.hosting[ef.shard])
				h.core.attach(ef.shard, handle)
				h.printf("host %s", handle)
			case regDeliver:
				local, ok := h.core.local(ef.shard)
				if !ok {
					h.fatalf("deliver to shard %s, which is not hosted", ef.shard)
				}
				line := fmt.Sprintf("deliver %s: %s", local, fmtPending(ef.p))
				if ef.accepted {
					line += " (accepted)"
				}
				h.printf("%s", line)
			case regHandOff:
				local, _ := h.core.local(ef.shard)
				h.printf("hand off %s", local)
			case regPassivateIdle:
				local, _ := h.core.local(ef.shard)
				h.printf("passivate idle %s: tick %d, idle after %d", local, ef.tick, ef.ticks)
			case regArmTick:
				h.printf("tick in %v", ef.after)
			case regArmRegister:
				h.printf("register again in %v (%d)", ef.after, ef.tick)
			case regTerminate:
				local, _ := h.core.local(ef.shard)
				h.printf("terminate %s", local)
			case regLeft:
				h.printf("left")
			case regGone:
				h.printf("gone")
			case regDeadLetter:
				h.printf("dead letter: %s %s: %v", ef.shard, fmtPending(ef.p), ef.err)
			case regNote:
				h.printf("note %s: %s %v", ef.level, ef.note, ef.args)
			}
		}
	}
}

func (h *regionHarness) printState() {
	c := h.core
	flags := []string{fmt.Sprintf("epoch=%d", c.epoch), fmt.Sprintf("buffered=%d", c.buffered)}
	if !c.coordinator.IsZero() {
		flags = append(flags, "coordinator="+addrName(c.coordinator))
	}
	for _, f := range []struct {
		on   bool
		name string
	}{{c.registered, "registered"}, {c.leaving, "leaving"}, {c.leaveAcked, "leave-acked"}, {c.stopped, "stopped"}} {
		if f.on {
			flags = append(flags, f.name)
		}
	}
	for _, n := range slices.SortedFunc(maps.Keys(c.flushes), cluster.UniqueAddress.Compare) {
		flags = append(flags, fmt.Sprintf("flushing=%s#%d", addrName(n), c.flushes[n]))
	}
	h.printf("region %s", strings.Join(flags, " "))
	for _, id := range slices.Sorted(maps.Keys(c.shards)) {
		e := c.shards[id]
		line := "shard " + id
		if !e.home.IsZero() {
			line += " home=" + addrName(e.home)
		}
		if e.hosted {
			line += " local=" + e.local
		}
		if e.handingOff {
			line += " handing-off"
		}
		if e.requested {
			line += " requested"
		}
		if e.handOver {
			line += " hand-over"
		}
		if !e.awaiting.IsZero() {
			line += " awaiting=" + addrName(e.awaiting)
		}
		if e.stopping {
			line += " stopping, awaiting fences from " + strings.Join(addrNames(e.stopWaits), ",")
		}
		if len(e.buffer) > 0 {
			parts := make([]string, len(e.buffer))
			for i, p := range e.buffer {
				parts[i] = fmtPending(p)
			}
			line += " buffer=[" + strings.Join(parts, ", ") + "]"
		}
		h.printf("%s", line)
	}
}
