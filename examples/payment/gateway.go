package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/cenkalti/backoff/v4"
)

// Issuer is the card issuer as the entity's work sees it. Both calls return
// the issuer's answer, or an error: a Failure for the outcomes the gateway
// table names, anything else for the unexpected. A call must end by itself:
// the entity does not cancel a call once it is made (issuing.go).
type Issuer interface {
	Authorize(ctx context.Context, req IssuerRequest) (IssuerResponse, error)
	Reverse(ctx context.Context, req IssuerRequest) (IssuerResponse, error)
}

// Message type indicators of the issuer protocol.
const (
	MTIAuthorization         = "0100"
	MTIAuthorizationFailure  = "0120" // failure-cancel of an authorization
	MTIReversal              = "0400"
	MTIReversalFailureCancel = "0420" // failure-cancel of a reversal
)

func mtiName(mti string) string {
	switch mti {
	case MTIAuthorization:
		return "authorization"
	case MTIReversal:
		return "reversal"
	}
	return "failure cancel"
}

// IssuerRequest is the JSON body posted to the issuer.
type IssuerRequest struct {
	MTI               string `json:"mti"`
	PAN               string `json:"pan"`
	AmountTran        string `json:"amountTran"`   // 12 digits, zero-padded
	TranDateTime      string `json:"tranDateTime"` // MMddHHmmss; a reversal keeps the original's
	TransactionID     string `json:"transactionId"`
	AcceptorID        string `json:"accptrId"` // 15 chars, left-justified
	PaymentID         string `json:"paymentId"`
	OriginalPaymentID string `json:"originalPaymentId,omitempty"` // reversals only
	TerminalID        string `json:"terminalId"`
}

// IssuerResponse is the issuer's answer to a 200.
type IssuerResponse struct {
	IntranID string `json:"intranid"`
	AuthID   string `json:"authId"`
	ErrCode  string `json:"rErrcode"`
}

// Issuer result codes the entity looks at; every other code is an error.
const (
	ErrCodeOK              = "00000"
	ErrCodeAlreadyCanceled = "TW005"
)

// IssuerClientConfig tunes IssuerClient; zero fields take the defaults of
// DefaultIssuerClientConfig (the original's gateway reference.conf).
type IssuerClientConfig struct {
	// URL receives the POSTs, e.g. http://127.0.0.1:8083/payment.
	URL string
	// ResponseTimeout bounds each request. Default 3s.
	ResponseTimeout time.Duration
	// RetryAttempts is how many times a failure-cancel is retried after
	// its first try. Default 2.
	RetryAttempts int
	// RetryDelay is the pause between failure-cancel tries. Default 1s.
	RetryDelay time.Duration
	// MaxIdleConns is how many idle connections to the issuer are kept for
	// reuse. Size it to the issuer calls in flight at peak (about the API's
	// concurrent requests): with fewer, every call above it opens a new
	// connection and leaves one in TIME_WAIT. Default 256.
	MaxIdleConns int
	// DialTimeout bounds opening a connection, a part of ResponseTimeout
	// that fails fast when the issuer is unreachable. Default 1s.
	DialTimeout time.Duration
	// IdleConnTimeout closes connections idle this long. Default 90s.
	IdleConnTimeout time.Duration
}

// DefaultIssuerClientConfig returns the defaults documented on IssuerClientConfig.
func DefaultIssuerClientConfig() IssuerClientConfig {
	return IssuerClientConfig{
		ResponseTimeout: 3 * time.Second, RetryAttempts: 2, RetryDelay: time.Second,
		MaxIdleConns: 256, DialTimeout: time.Second, IdleConnTimeout: 90 * time.Second,
	}
}

// IssuerClient calls the issuer over HTTP and folds the outcome as the
// original gateway did (IssuingServiceGatewayImpl): 200 is an answer, 400
// and unexpected statuses are failures, and when the outcome is unknown (a
// 5xx, a timeout, a broken connection or body) it sends a failure-cancel so
// that the issuer voids whatever it may have done.
type IssuerClient struct {
	cfg  IssuerClientConfig
	http *http.Client
}

// NewIssuerClient returns a client for cfg. httpClient may be nil: then
// the client gets its own pooled transport (newIssuerTransport).
//
// Go's http.Transport never retries a POST by itself (it is not
// replayable), which is what the original's max-retries = 0 ensured: a
// retried authorization could settle twice.
func NewIssuerClient(cfg IssuerClientConfig, httpClient *http.Client) *IssuerClient {
	d := DefaultIssuerClientConfig()
	if cfg.ResponseTimeout <= 0 {
		cfg.ResponseTimeout = d.ResponseTimeout
	}
	if cfg.RetryAttempts < 0 {
		cfg.RetryAttempts = 0
	}
	if cfg.RetryDelay <= 0 {
		cfg.RetryDelay = d.RetryDelay
	}
	if cfg.MaxIdleConns <= 0 {
		cfg.MaxIdleConns = d.MaxIdleConns
	}
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = d.DialTimeout
	}
	if cfg.IdleConnTimeout <= 0 {
		cfg.IdleConnTimeout = d.IdleConnTimeout
	}
	if httpClient == nil {
		httpClient = &http.Client{Transport: newIssuerTransport(cfg)}
	}
	return &IssuerClient{cfg: cfg, http: httpClient}
}

// newIssuerTransport pools connections to the one issuer host. The
// default transport keeps 2 idle connections per host, so under load most
// calls would open a connection and close another.
func newIssuerTransport(cfg IssuerClientConfig) *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.DialContext = (&net.Dialer{Timeout: cfg.DialTimeout, KeepAlive: 30 * time.Second}).DialContext
	t.MaxIdleConns = cfg.MaxIdleConns
	t.MaxIdleConnsPerHost = cfg.MaxIdleConns
	t.IdleConnTimeout = cfg.IdleConnTimeout
	t.TLSHandshakeTimeout = cfg.DialTimeout
	return t
}

// Authorize sends an authorization (MTI 0100).
func (c *IssuerClient) Authorize(ctx context.Context, req IssuerRequest) (IssuerResponse, error) {
	req.MTI = MTIAuthorization
	return c.send(ctx, req)
}

// Reverse sends a reversal (MTI 0400).
func (c *IssuerClient) Reverse(ctx context.Context, req IssuerRequest) (IssuerResponse, error) {
	req.MTI = MTIReversal
	return c.send(ctx, req)
}

func (c *IssuerClient) send(ctx context.Context, req IssuerRequest) (IssuerResponse, error) {
	name := mtiName(req.MTI)
	var resp IssuerResponse
	status, err := c.post(ctx, req, &resp)
	switch {
	case err != nil: // timeout, connection error, a 200 without the JSON answer: the issuer may have acted
		return IssuerResponse{}, c.failureCancel(ctx, req)
	case status == http.StatusOK:
		return resp, nil
	case status == http.StatusBadRequest:
		return IssuerResponse{}, IssuingServiceBadRequest(name)
	case status >= 500:
		return IssuerResponse{}, c.failureCancel(ctx, req)
	default:
		return IssuerResponse{}, IssuingServiceServerError(name, "-")
	}
}

// statusError is a 5xx answer to a failure-cancel, which is retried.
type statusError int

func (e statusError) Error() string { return fmt.Sprintf("issuer answered %d", int(e)) }

// failureCancel resends req as a failure-cancel (0100 → 0120, otherwise
// 0420), retrying timeouts, connection errors and 5xx. Its outcome is always
// a Failure: whatever the issuer did, the request did not succeed.
func (c *IssuerClient) failureCancel(ctx context.Context, req IssuerRequest) error {
	const name = "failure cancel"
	original := mtiName(req.MTI)
	fc := req
	if req.MTI == MTIAuthorization {
		fc.MTI = MTIAuthorizationFailure
	} else {
		fc.MTI = MTIReversalFailureCancel
	}
	try := func() error {
		status, err := c.post(ctx, fc, nil)
		switch {
		case err != nil:
			return err
		case status == http.StatusOK:
			return backoff.Permanent(IssuingServiceUnavailable(name))
		case status == http.StatusBadRequest:
			return backoff.Permanent(IssuingServiceBadRequest(name))
		case status >= 500:
			return statusError(status)
		default:
			return backoff.Permanent(IssuingServiceServerError(name, "-"))
		}
	}
	policy := backoff.WithContext(
		backoff.WithMaxRetries(backoff.NewConstantBackOff(c.cfg.RetryDelay), uint64(c.cfg.RetryAttempts)), ctx)
	err := backoff.Retry(try, policy)
	if f, ok := errors.AsType[Failure](err); ok {
		return f
	}
	// Retries exhausted: say why the last try failed.
	if _, ok := errors.AsType[statusError](err); ok {
		return IssuingServiceServerError(name, "-")
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return TimeOut(name)
	}
	return IssuingServiceServerError(original, "-")
}

// post sends one request, bounded by ResponseTimeout, and decodes a 200's
// body into answer unless it is nil; a body that does not decode is an error.
func (c *IssuerClient) post(ctx context.Context, req IssuerRequest, answer *IssuerResponse) (status int, err error) {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.ResponseTimeout)
	defer cancel()
	payload, err := json.Marshal(req)
	if err != nil {
		return 0, err
	}
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, c.cfg.URL, bytes.NewReader(payload))
	if err != nil {
		return 0, err
	}
	hreq.Header.Set("Content-Type", "application/json")
	resp, err := c.http.Do(hreq)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	err = readBody(resp.Body, 1<<20, func(body []byte, readErr error) error {
		if readErr != nil || resp.StatusCode != http.StatusOK || answer == nil {
			return readErr
		}
		return json.Unmarshal(body, answer)
	})
	if err != nil {
		return 0, err
	}
	return resp.StatusCode, nil
}
