// Package browsertest drives a real headless Chromium from Go tests (with
// chromedp): start a fresh browser, load a page, wait for a JavaScript
// condition, read values, take a screenshot. The browser runs with flags fit
// for containers and root, a fresh profile in the test's temporary directory,
// and every background service that would reach the network turned off.
//
// Without a Chromium on the machine a test skips, unless SHOAL_REQUIRE_BROWSER
// is set (make test sets it; scripts/chromium.sh installs Chromium), so CI
// fails rather than silently skipping.
package browsertest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
)

// Timeout bounds each step (load, wait, evaluate). It is an upper bound for a
// broken run on a busy machine, never a pause: steps end as soon as the page
// is ready.
const Timeout = 60 * time.Second

// candidates are the names a Chromium or Chrome binary goes by on PATH.
var candidates = []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "headless-shell", "headless_shell"}

// ErrNoChromium means no Chromium is installed: a browser test skips.
var ErrNoChromium = errors.New("no Chromium on PATH; run scripts/chromium.sh or set SHOAL_CHROMIUM")

// FindChromium returns the browser to use: $SHOAL_CHROMIUM when set (an
// error other than ErrNoChromium when it is not a program), else the first
// of the usual names on PATH, else ErrNoChromium.
func FindChromium() (string, error) {
	if p := os.Getenv("SHOAL_CHROMIUM"); p != "" {
		path, err := exec.LookPath(p)
		if err != nil {
			return "", fmt.Errorf("SHOAL_CHROMIUM=%s: %w", p, err)
		}
		return path, nil
	}
	for _, name := range candidates {
		if p, err := exec.LookPath(name); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("%w (looked for %v)", ErrNoChromium, candidates)
}

// Browser is one headless browser owned by a test.
type Browser struct {
	ctx context.Context // the first tab; its browser closes at the test's cleanup

	mu         sync.Mutex
	exceptions []string // uncaught JavaScript exceptions of every tab
}

// Start starts a fresh headless browser for t and closes it at t's cleanup.
// It skips t when no Chromium is installed, or fails it when the environment
// variable SHOAL_REQUIRE_BROWSER is set or SHOAL_CHROMIUM names no program.
// Uncaught JavaScript exceptions in any tab of the browser fail t at cleanup.
func Start(t testing.TB) *Browser {
	t.Helper()
	path, err := FindChromium()
	if err != nil {
		if !errors.Is(err, ErrNoChromium) {
			t.Fatalf("browsertest: %v", err)
		}
		if os.Getenv("SHOAL_REQUIRE_BROWSER") != "" {
			t.Fatalf("browsertest: SHOAL_REQUIRE_BROWSER is set: %v", err)
		}
		t.Skipf("browsertest: skipping the browser test: %v (set SHOAL_REQUIRE_BROWSER=1 to fail instead)", err)
	}
	profile := filepath.Join(t.TempDir(), "profile")

	opts := append(chromedp.DefaultExecAllocatorOptions[:], // an array: append copies
		chromedp.ExecPath(path),
		chromedp.UserDataDir(profile),
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
	b := &Browser{}
	tab, cancelTab := chromedp.NewContext(allocCtx, chromedp.WithLogf(t.Logf))
	b.ctx = tab
	t.Cleanup(func() {
		// Close gracefully, so Chrome ends its helper processes before the
		// profile directory is removed; the cancels free what is left.
		closeCtx, cancel := context.WithTimeout(tab, Timeout)
		defer cancel()
		if err := chromedp.Cancel(closeCtx); err != nil && !errors.Is(err, context.Canceled) {
			t.Logf("browsertest: closing the browser: %v", err)
		}
		cancelTab()
		cancelAlloc()
		b.mu.Lock()
		defer b.mu.Unlock()
		for _, e := range b.exceptions {
			t.Errorf("browsertest: uncaught JavaScript exception: %s", e)
		}
	})
	// Start the browser now, without a deadline: a deadline on the first run
	// would close the browser when it passes.
	if err := chromedp.Do(tab); err != nil {
		t.Fatalf("browsertest: starting %s: %v", path, err)
	}
	b.watch(t, tab)
	return b
}

// Tab is the browser's first tab.
func (b *Browser) Tab() context.Context { return b.ctx }

// NewTab opens another tab, closed at t's cleanup.
func (b *Browser) NewTab(t testing.TB) context.Context {
	t.Helper()
	tab, cancel := chromedp.NewContext(b.ctx)
	t.Cleanup(cancel)
	if err := chromedp.Do(tab); err != nil {
		t.Fatalf("browsertest: opening a tab: %v", err)
	}
	b.watch(t, tab)
	return tab
}

// watch records the uncaught exceptions of a tab.
func (b *Browser) watch(t testing.TB, tab context.Context) {
	t.Helper()
	err := chromedp.Listen(tab, func(ev any) {
		if e, ok := ev.(*runtime.EventExceptionThrown); ok && e.ExceptionDetails != nil {
			b.mu.Lock()
			b.exceptions = append(b.exceptions, describe(e.ExceptionDetails))
			b.mu.Unlock()
		}
	})
	if err != nil {
		t.Fatalf("browsertest: listening to the tab: %v", err)
	}
}

func describe(d *runtime.ExceptionDetails) string {
	msg := d.Text
	if d.Exception != nil && d.Exception.Description != "" {
		msg = d.Exception.Description
	}
	return fmt.Sprintf("%s (%s:%d:%d)", msg, d.URL, d.LineNumber+1, d.ColumnNumber+1)
}

// Load navigates tab to url and waits for the page to load.
func Load(t testing.TB, tab context.Context, url string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(tab, Timeout)
	defer cancel()
	if err := chromedp.Do(ctx, chromedp.Navigate(url)); err != nil {
		t.Fatalf("browsertest: loading %s: %v", url, err)
	}
}

// WaitFor waits until the JavaScript expression is truthy in tab, checking
// on every animation frame. After Timeout it fails t, saying what it waited
// for and showing the page's text.
func WaitFor(t testing.TB, tab context.Context, what, expression string) {
	t.Helper()
	if err := TryWaitFor(tab, expression); err != nil {
		t.Fatalf("browsertest: waiting for %s: %v\npage text:\n%s", what, err, pageText(tab))
	}
}

// pageText is the visible text of the page in tab, for failure messages.
func pageText(tab context.Context) string {
	ctx, cancel := context.WithTimeout(tab, Timeout)
	defer cancel()
	text, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body ? document.body.innerText : ''`))
	if err != nil {
		return fmt.Sprintf("(cannot read it: %v)", err)
	}
	return text
}

// TryWaitFor is WaitFor that returns the error, for a test that wants to
// report more (such as the state it saw) before it fails.
func TryWaitFor(tab context.Context, expression string) error {
	ctx, cancel := context.WithTimeout(tab, Timeout+5*time.Second)
	defer cancel()
	_, err := chromedp.Run(ctx, chromedp.Poll[chromedp.Void](expression, chromedp.WithPollingTimeout(Timeout)))
	return err
}

// Eval evaluates a JavaScript expression in tab and decodes its JSON value.
func Eval[T any](t testing.TB, tab context.Context, expression string) T {
	t.Helper()
	ctx, cancel := context.WithTimeout(tab, Timeout)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expression))
	if err != nil {
		t.Fatalf("browsertest: evaluating %q: %v", expression, err)
	}
	return v
}

// Screenshot writes a PNG of the whole page to the test's temporary
// directory, logs its path and returns it.
func Screenshot(t testing.TB, tab context.Context, name string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(tab, Timeout)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("browsertest: screenshot: %v", err)
	}
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatalf("browsertest: writing the screenshot: %v", err)
	}
	t.Logf("screenshot: %s", path)
	return path
}
