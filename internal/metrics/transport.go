package metrics

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// Transport holds a message transport's collectors. A nil *Transport is off.
type Transport struct {
	bytesSent, bytesReceived, framesSent, framesReceived *prometheus.CounterVec
	queueDesc                                            *prometheus.Desc

	mu    sync.Mutex
	peers map[string]*Peer
}

// NewTransport registers a transport's collectors on reg; queued is
// called at each scrape for the frames queued per peer node. nil when reg
// is nil.
func NewTransport(reg prometheus.Registerer, queued func() map[string]int) *Transport {
	if reg == nil {
		return nil
	}
	counter := func(name, help string) *prometheus.CounterVec {
		return register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Subsystem: "transport", Name: name, Help: help,
		}, []string{"peer"}))
	}
	t := &Transport{
		peers:          make(map[string]*Peer),
		bytesSent:      counter("sent_bytes_total", "Bytes written to a peer node's connections, length prefixes included."),
		bytesReceived:  counter("received_bytes_total", "Bytes read from a peer node's connections after the handshake."),
		framesSent:     counter("sent_frames_total", "Message frames written to a peer node."),
		framesReceived: counter("received_frames_total", "Message frames read from a peer node (control frames not counted)."),
		queueDesc: prometheus.NewDesc(prometheus.BuildFQName(Namespace, "transport", "queue_depth"),
			"Messages queued for a peer node and not yet written.", []string{"peer"}, nil),
	}
	registerScraped(reg, queueCollector{t.queueDesc, queued}.Collect, t.queueDesc)
	return t
}

// Peer returns the handle of peer node name (its incarnations share it);
// nil when t is nil.
func (t *Transport) Peer(name string) *Peer {
	if t == nil {
		return nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	p := t.peers[name]
	if p == nil {
		p = &Peer{
			bytesSent: t.bytesSent.WithLabelValues(name), bytesReceived: t.bytesReceived.WithLabelValues(name),
			framesSent: t.framesSent.WithLabelValues(name), framesReceived: t.framesReceived.WithLabelValues(name),
		}
		t.peers[name] = p
	}
	return p
}

// Peer is the collectors of one peer node. A nil *Peer does nothing.
type Peer struct {
	bytesSent, bytesReceived, framesSent, framesReceived prometheus.Counter
}

// Sent records one write of frames totalling bytes.
func (p *Peer) Sent(frames, bytes int) {
	if p != nil {
		p.framesSent.Add(float64(frames))
		p.bytesSent.Add(float64(bytes))
	}
}

// Received records message frames read and bytes read.
func (p *Peer) Received(frames, bytes int) {
	if p != nil {
		p.framesReceived.Add(float64(frames))
		p.bytesReceived.Add(float64(bytes))
	}
}

type queueCollector struct {
	desc   *prometheus.Desc
	queued func() map[string]int
}

func (c queueCollector) Collect(ch chan<- prometheus.Metric) {
	for peer, n := range c.queued() {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(n), peer)
	}
}
