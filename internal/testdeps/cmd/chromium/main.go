// Command chromium drives one headless Chromium with chromedp for
// internal/browsertest of the main module, which keeps chromedp out of the
// main module's dependencies by asking this program instead. It speaks the
// JSON-lines protocol of package jsonlines on stdin and stdout:
//
//	start {path, profile, logs}     → {"tab"}: starts the browser; its first tab
//	new_tab                         → {"tab"}
//	close_tab {tab}
//	load {tab, url}                 navigates and waits for the load
//	poll {tab, expression, timeout_ms}  waits until the expression is truthy
//	eval {tab, expression}          → {"type", "value"}: the result by value
//	screenshot {tab}                → {"png"}: the whole page
//	close                           → {"exceptions"}: closes the browser and
//	                                  returns every uncaught JavaScript exception
//
// When its stdin closes (the test process ended, however it ended) or it
// gets SIGINT or SIGTERM, it closes the browser and exits.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/shoal-dev/shoal/internal/testdeps/jsonlines"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	h := &helper{tabs: map[string]tab{}}
	err := jsonlines.Serve(ctx, os.Stdin, os.Stdout, h.handle)
	h.close(context.Background())
	if err != nil && ctx.Err() == nil {
		fmt.Fprintf(os.Stderr, "chromium: %v\n", err)
		os.Exit(1)
	}
}

// closeTimeout bounds the graceful close of the browser.
const closeTimeout = 60 * time.Second

type tab struct {
	ctx    context.Context
	cancel context.CancelFunc
}

type helper struct {
	mu          sync.Mutex
	first       context.Context // the first tab; nil before start and after close
	cancelAlloc context.CancelFunc
	tabs        map[string]tab
	nextTab     int
	exceptions  []string // uncaught JavaScript exceptions of every tab
}

type (
	startArgs struct {
		Path    string `json:"path"`
		Profile string `json:"profile"`
	}
	tabArgs struct {
		Tab        string `json:"tab"`
		URL        string `json:"url,omitempty"`
		Expression string `json:"expression,omitempty"`
		TimeoutMS  int64  `json:"timeout_ms,omitempty"`
	}
)

func (h *helper) handle(ctx context.Context, op string, args json.RawMessage) (any, error) {
	switch op {
	case "start":
		a, err := jsonlines.Decode[startArgs](args)
		if err != nil {
			return nil, err
		}
		return h.start(a)
	case "new_tab":
		return h.newTab()
	case "close":
		return map[string][]string{"exceptions": h.close(ctx)}, nil
	}
	a, err := jsonlines.Decode[tabArgs](args)
	if err != nil {
		return nil, err
	}
	h.mu.Lock()
	t, ok := h.tabs[a.Tab]
	h.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("no tab %q", a.Tab)
	}
	if op == "close_tab" {
		h.mu.Lock()
		delete(h.tabs, a.Tab)
		h.mu.Unlock()
		t.cancel()
		return nil, nil
	}
	// The request's deadline, on the tab's context (chromedp finds the tab
	// in the context's values).
	tctx, cancel := context.WithCancel(t.ctx)
	defer cancel()
	if d, ok := ctx.Deadline(); ok {
		tctx, cancel = context.WithDeadline(tctx, d)
		defer cancel()
	}
	defer context.AfterFunc(ctx, cancel)()
	switch op {
	case "load":
		return nil, chromedp.Do(tctx, chromedp.Navigate(a.URL))
	case "poll":
		_, err := chromedp.Run(tctx, chromedp.Poll[chromedp.Void](a.Expression,
			chromedp.WithPollingTimeout(time.Duration(a.TimeoutMS)*time.Millisecond)))
		return nil, err
	case "eval":
		obj, err := chromedp.Run(tctx, chromedp.Evaluate[*runtime.RemoteObject](a.Expression, chromedp.EvalAsValue))
		if err != nil {
			return nil, err
		}
		return map[string]any{"type": obj.Type, "value": json.RawMessage(nonEmpty(obj.Value))}, nil
	case "screenshot":
		png, err := chromedp.Run(tctx, chromedp.FullScreenshot(100))
		if err != nil {
			return nil, err
		}
		return map[string][]byte{"png": png}, nil
	}
	return nil, fmt.Errorf("%w %q", jsonlines.ErrUnknownOp, op)
}

// nonEmpty is v, or JSON null for no value (undefined).
func nonEmpty(v []byte) []byte {
	if len(v) == 0 {
		return []byte("null")
	}
	return v
}

// start starts the browser with flags fit for containers and root, the
// given fresh profile, and every background service that would reach the
// network turned off.
func (h *helper) start(a startArgs) (any, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.first != nil {
		return nil, errors.New("the browser is running")
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:], // an array: append copies
		chromedp.ExecPath(a.Path),
		chromedp.UserDataDir(a.Profile),
		chromedp.Headless,
		chromedp.NoSandbox, // containers and root: the sandbox needs namespaces they lack
		chromedp.DisableGPU,
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.WindowSize(1280, 800),
		// No traffic beyond the loopback pages a test loads: no background
		// services, updates, sync, metrics or safe browsing, and no host name
		// resolves except loopback, so a forgotten service fails closed.
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-default-apps", true),
		chromedp.Flag("disable-extensions", true),
		chromedp.Flag("disable-domain-reliability", true),
		chromedp.Flag("disable-client-side-phishing-detection", true),
		chromedp.Flag("safebrowsing-disable-auto-update", true),
		chromedp.Flag("no-pings", true),
		chromedp.Flag("no-first-run", true),
		chromedp.Flag("metrics-recording-only", true),
		chromedp.Flag("disable-features", "Translate,OptimizationHints,MediaRouter,DialMediaRouteProvider,"+
			"AutofillServerCommunication,CertificateTransparencyComponentUpdater,InterestFeedContentSuggestions"),
		chromedp.Flag("host-resolver-rules", "MAP * ~NOTFOUND , EXCLUDE localhost , EXCLUDE 127.0.0.1 , EXCLUDE [::1]"),
	)
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	logf := log.New(os.Stderr, "chromium: ", 0).Printf
	first, cancelFirst := chromedp.NewContext(allocCtx, chromedp.WithLogf(logf))
	// Start the browser now, without a deadline: a deadline on the first run
	// would close the browser when it passes.
	if err := chromedp.Do(first); err != nil {
		cancelFirst()
		cancelAlloc()
		return nil, fmt.Errorf("starting %s: %w", a.Path, err)
	}
	if err := h.watch(first); err != nil {
		cancelFirst()
		cancelAlloc()
		return nil, err
	}
	h.first, h.cancelAlloc = first, cancelAlloc
	return map[string]string{"tab": h.addTab(first, cancelFirst)}, nil
}

func (h *helper) newTab() (any, error) {
	h.mu.Lock()
	first := h.first
	h.mu.Unlock()
	if first == nil {
		return nil, errors.New("no browser: start it first")
	}
	ctx, cancel := chromedp.NewContext(first)
	if err := chromedp.Do(ctx); err != nil {
		cancel()
		return nil, fmt.Errorf("opening a tab: %w", err)
	}
	if err := h.watch(ctx); err != nil {
		cancel()
		return nil, err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return map[string]string{"tab": h.addTab(ctx, cancel)}, nil
}

// addTab names a tab; h.mu is held.
func (h *helper) addTab(ctx context.Context, cancel context.CancelFunc) string {
	h.nextTab++
	id := strconv.Itoa(h.nextTab)
	h.tabs[id] = tab{ctx: ctx, cancel: cancel}
	return id
}

// watch records the uncaught exceptions of a tab.
func (h *helper) watch(tab context.Context) error {
	err := chromedp.Listen(tab, func(ev any) {
		if e, ok := ev.(*runtime.EventExceptionThrown); ok && e.ExceptionDetails != nil {
			h.mu.Lock()
			h.exceptions = append(h.exceptions, describe(e.ExceptionDetails))
			h.mu.Unlock()
		}
	})
	if err != nil {
		return fmt.Errorf("listening to the tab: %w", err)
	}
	return nil
}

func describe(d *runtime.ExceptionDetails) string {
	msg := d.Text
	if d.Exception != nil && d.Exception.Description != "" {
		msg = d.Exception.Description
	}
	return fmt.Sprintf("%s (%s:%d:%d)", msg, d.URL, d.LineNumber+1, d.ColumnNumber+1)
}

// close closes the browser gracefully, so Chrome ends its helper processes
// before the test removes the profile directory, and returns the uncaught
// exceptions seen. It does nothing when no browser runs.
func (h *helper) close(ctx context.Context) []string {
	h.mu.Lock()
	first, cancelAlloc, tabs := h.first, h.cancelAlloc, h.tabs
	h.first, h.cancelAlloc, h.tabs = nil, nil, map[string]tab{}
	exceptions := h.exceptions
	h.mu.Unlock()
	if first == nil {
		return exceptions
	}
	closeCtx, cancel := context.WithTimeout(first, closeTimeout)
	defer cancel()
	defer context.AfterFunc(ctx, cancel)()
	if err := chromedp.Cancel(closeCtx); err != nil && !errors.Is(err, context.Canceled) {
		log.Printf("chromium: closing the browser: %v", err)
	}
	for _, t := range tabs {
		t.cancel()
	}
	cancelAlloc()
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.exceptions
}
