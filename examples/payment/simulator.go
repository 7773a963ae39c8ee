package main

import (
	"encoding/json"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// Reaction is how the issuer simulator answers a request.
type Reaction struct {
	// Latency delays the answer.
	Latency time.Duration
	// Hang never answers: the request ends when the client gives up.
	Hang bool
	// Status is the HTTP status; 0 means 200.
	Status int
	// ErrCode is rErrcode of a 200 answer; "" means "00000".
	ErrCode string
	// Garbage answers 200 with a body that is not JSON.
	Garbage bool
}

// Rule picks a Reaction for the requests it matches: MTI "" matches every
// MTI, Amount 0 every amount. Times > 0 makes the rule apply to its next
// Times matches only.
type Rule struct {
	MTI      string
	Amount   int64
	Times    int
	Reaction Reaction
}

// Simulator is a card issuer for the example and its tests: it answers
// POSTs of IssuerRequest bodies by its rules, records the latest requests
// it received (KeepReceived of them: a long run must not grow it), and
// can be told to be slow, to fail, or to hang. Its zero value answers
// "00000" at once. It is safe for concurrent use.
type Simulator struct {
	// KeepReceived is how many of the latest requests Received returns;
	// older ones are forgotten. Set it before use. Default 1000.
	KeepReceived int

	mu       sync.Mutex
	total    int
	rules    []Rule
	received []IssuerRequest
	authID   int
	closed   chan struct{}
	once     sync.Once
}

// NewSimulator returns a simulator that approves everything.
func NewSimulator() *Simulator { return &Simulator{closed: make(chan struct{})} }

// SetRules replaces the rules; the first matching rule applies, and no match
// means success.
func (s *Simulator) SetRules(rules ...Rule) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rules = append([]Rule(nil), rules...)
}

// DefaultKeepReceived is the default of Simulator.KeepReceived.
const DefaultKeepReceived = 1000

// Received returns the latest requests received (at most KeepReceived), oldest first.
func (s *Simulator) Received() []IssuerRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]IssuerRequest(nil), s.received[max(0, len(s.received)-s.keep()):]...)
}

// ReceivedCount is how many requests the simulator received in all.
func (s *Simulator) ReceivedCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.total
}

func (s *Simulator) keep() int {
	if s.KeepReceived > 0 {
		return s.KeepReceived
	}
	return DefaultKeepReceived
}

// record keeps req among the latest; s.mu is held. The log is trimmed
// when it reaches twice its bound, so recording stays O(1) amortised.
func (s *Simulator) record(req IssuerRequest) {
	s.total++
	s.received = append(s.received, req)
	if keep := s.keep(); len(s.received) >= 2*keep {
		s.received = append([]IssuerRequest(nil), s.received[len(s.received)-keep:]...)
	}
}

// Close releases hanging and delayed requests: their connections are
// dropped, unanswered.
func (s *Simulator) Close() { s.once.Do(func() { close(s.closed) }) }

// ServeHTTP implements http.Handler for POST /payment.
func (s *Simulator) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		http.Error(w, "POST only", http.StatusMethodNotAllowed)
		return
	}
	var req IssuerRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	amount, _ := strconv.ParseInt(req.AmountTran, 10, 64)
	s.mu.Lock()
	s.record(req)
	react := Reaction{}
	for i := range s.rules {
		rule := &s.rules[i]
		if (rule.MTI == "" || rule.MTI == req.MTI) && (rule.Amount == 0 || rule.Amount == amount) {
			if rule.Times > 0 {
				rule.Times--
				if rule.Times == 0 {
					s.rules = append(s.rules[:i:i], s.rules[i+1:]...)
				}
			}
			react = rule.Reaction
			break
		}
	}
	s.authID++
	authID := s.authID
	s.mu.Unlock()

	if react.Hang {
		select {
		case <-r.Context().Done():
		case <-s.closed:
			// Drop the connection: returning would answer 200 with no body.
			panic(http.ErrAbortHandler)
		}
		return
	}
	if react.Latency > 0 {
		t := time.NewTimer(react.Latency)
		defer t.Stop()
		select {
		case <-t.C:
		case <-r.Context().Done():
			return
		case <-s.closed:
			panic(http.ErrAbortHandler)
		}
	}
	switch {
	case react.Status != 0 && react.Status != http.StatusOK:
		http.Error(w, http.StatusText(react.Status), react.Status)
	case react.Garbage:
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte("{not json"))
	default:
		code := react.ErrCode
		if code == "" {
			code = ErrCodeOK
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(IssuerResponse{
			IntranID: "I" + req.TransactionID,
			AuthID:   strconv.Itoa(authID),
			ErrCode:  code,
		})
	}
}
