// Package browsertest drives a real headless Chromium from Go tests: start a
// fresh browser, load a page, wait for a JavaScript condition, read values,
// take a screenshot. The browser runs with flags fit for containers and
// root, a fresh profile in the test's temporary directory, and every
// background service that would reach the network turned off.
//
// The browser is driven with chromedp by the program
// internal/testdeps/cmd/chromium (through package helperproc), one per
// Browser: chromedp stays out of the main module's dependencies.
//
// Without a Chromium on the machine a test skips, unless SHOAL_REQUIRE_BROWSER
// is set (make test sets it; scripts/chromium.sh installs Chromium), so CI
// fails rather than silently skipping.
package browsertest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/shoal-dev/shoal/internal/helperproc"
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

// startTimeout bounds starting the browser, which includes building the
// helper program the first time.
const startTimeout = 10 * time.Minute

// Browser is one headless browser owned by a test.
type Browser struct {
	proc  *helperproc.Proc
	first context.Context // the first tab
}

// tabKey is the context key of a tab.
type tabKey struct{}

// tab names a tab of a browser.
type tab struct {
	b  *Browser
	id string
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

	proc, err := helperproc.Start("chromium")
	if err != nil {
		t.Fatalf("browsertest: %v", err)
	}
	b := &Browser{proc: proc}
	t.Cleanup(func() {
		// Close gracefully, so Chrome ends its helper processes before the
		// profile directory is removed (the helper allows it Timeout).
		ctx, cancel := context.WithTimeout(context.Background(), 2*Timeout)
		defer cancel()
		var closed struct{ Exceptions []string }
		if err := proc.Call(ctx, "close", nil, &closed); err != nil {
			t.Logf("browsertest: closing the browser: %v", err)
		}
		if err := proc.Close(ctx); err != nil {
			t.Logf("browsertest: %v", err)
		}
		for _, e := range closed.Exceptions {
			t.Errorf("browsertest: uncaught JavaScript exception: %s", e)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	var started struct{ Tab string }
	if err := proc.Call(ctx, "start", map[string]string{"path": path, "profile": profile}, &started); err != nil {
		t.Fatalf("browsertest: starting %s: %v", path, err)
	}
	b.first = b.tab(started.Tab)
	return b
}

func (b *Browser) tab(id string) context.Context {
	return context.WithValue(context.Background(), tabKey{}, tab{b: b, id: id})
}

// Tab is the browser's first tab.
func (b *Browser) Tab() context.Context { return b.first }

// NewTab opens another tab, closed at t's cleanup.
func (b *Browser) NewTab(t testing.TB) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	defer cancel()
	var opened struct{ Tab string }
	if err := b.proc.Call(ctx, "new_tab", nil, &opened); err != nil {
		t.Fatalf("browsertest: opening a tab: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), Timeout)
		defer cancel()
		_ = b.proc.Call(ctx, "close_tab", map[string]string{"tab": opened.Tab}, nil)
	})
	return b.tab(opened.Tab)
}

// call sends op for the tab in ctx (a context of Tab or NewTab, or derived
// from one).
func call(ctx context.Context, op string, args map[string]any, result any) error {
	tb, ok := ctx.Value(tabKey{}).(tab)
	if !ok {
		return errors.New("browsertest: the context is not a tab of Browser.Tab or Browser.NewTab")
	}
	args["tab"] = tb.id
	return tb.b.proc.Call(ctx, op, args, result)
}

// Load navigates tab to url and waits for the page to load.
func Load(t testing.TB, tab context.Context, url string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(tab, Timeout)
	defer cancel()
	if err := call(ctx, "load", map[string]any{"url": url}, nil); err != nil {
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
	text, err := eval[string](tab, `document.body ? document.body.innerText : ''`)
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
	return call(ctx, "poll", map[string]any{"expression": expression, "timeout_ms": Timeout.Milliseconds()}, nil)
}

// Eval evaluates a JavaScript expression in tab and decodes its JSON value.
func Eval[T any](t testing.TB, tab context.Context, expression string) T {
	t.Helper()
	v, err := eval[T](tab, expression)
	if err != nil {
		t.Fatalf("browsertest: evaluating %q: %v", expression, err)
	}
	return v
}

// eval evaluates expression by value. A null or undefined result is an
// error unless T can be nil.
func eval[T any](tab context.Context, expression string) (T, error) {
	var res T
	ctx, cancel := context.WithTimeout(tab, Timeout)
	defer cancel()
	var r struct {
		Type  string
		Value json.RawMessage
	}
	if err := call(ctx, "eval", map[string]any{"expression": expression}, &r); err != nil {
		return res, err
	}
	if len(r.Value) == 0 || string(r.Value) == "null" {
		switch reflect.TypeFor[T]().Kind() {
		case reflect.Pointer, reflect.Map, reflect.Slice, reflect.Chan, reflect.Func, reflect.Interface:
			return res, nil
		}
		if r.Type == "undefined" {
			return res, errors.New("the value is undefined")
		}
		return res, errors.New("the value is null")
	}
	err := json.Unmarshal(r.Value, &res)
	return res, err
}

// Screenshot writes a PNG of the whole page to the test's temporary
// directory, logs its path and returns it.
func Screenshot(t testing.TB, tab context.Context, name string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(tab, Timeout)
	defer cancel()
	var shot struct{ PNG []byte }
	if err := call(ctx, "screenshot", map[string]any{}, &shot); err != nil {
		t.Fatalf("browsertest: screenshot: %v", err)
	}
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, shot.PNG, 0o644); err != nil {
		t.Fatalf("browsertest: writing the screenshot: %v", err)
	}
	t.Logf("screenshot: %s", path)
	return path
}
