package browsertest_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/shoal-dev/shoal/internal/browsertest"
)

// recordingTB records Errorf calls instead of failing the test.
type recordingTB struct {
	testing.TB
	mu     sync.Mutex
	errors []string
}

func (r *recordingTB) Errorf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errors = append(r.errors, fmt.Sprintf(format, args...))
}

const throwingPage = `<!doctype html><title>t</title><p id="p">waiting</p><script>
setTimeout(() => { document.getElementById('p').textContent = 'thrown'; throw new Error('boom-4711'); }, 0);
</script>`

// A page that throws an uncaught exception fails the test at cleanup,
// though every wait succeeded.
func TestUncaughtExceptionFailsTheTest(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprint(w, throwingPage)
	}))
	t.Cleanup(srv.Close)

	rec := &recordingTB{}
	started := false
	t.Run("page", func(t *testing.T) {
		rec.TB = t
		b := browsertest.Start(rec)
		started = true
		browsertest.Load(rec, b.Tab(), srv.URL)
		browsertest.WaitFor(rec, b.Tab(), "the script to run", `document.getElementById('p').textContent === 'thrown'`)
	})
	if !started {
		t.Skip("no browser: see the subtest")
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.errors) != 1 || !strings.Contains(rec.errors[0], "boom-4711") {
		t.Fatalf("errors reported %q, want one about the uncaught boom-4711", rec.errors)
	}
}
