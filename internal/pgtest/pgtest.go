// Package pgtest starts PostgreSQL in a container for integration tests and
// hands each test a schema of its own.
//
// One container serves a whole test package: declare a Server, run the
// package through it from TestMain, and ask it for pools:
//
//	var pg = pgtest.New()
//
//	func TestMain(m *testing.M) { os.Exit(pg.Run(m)) }
//
//	func TestSomething(t *testing.T) {
//		pool := pg.Pool(t) // a fresh schema with the Shoal migrations applied
//		...
//	}
//
// The container starts on first use, so a package whose tests all skip
// starts none, and Run terminates it after the tests. Tests that stop and
// start the server (fault tests) take a container of their own with Start.
//
// The image is $SHOAL_POSTGRES_IMAGE when set; otherwise the local image
// built by scripts/postgres-image.sh (shoal-postgres:15), which is built on
// first use when missing and the script is at hand; otherwise the official
// postgres:15. Tests skip, saying why, only when no Docker daemon is
// reachable.
//
// The containers are run by the program internal/testdeps/cmd/pgcontainer
// (through package helperproc), one per Server: testcontainers stays out of
// the main module's dependencies. The program terminates its containers
// when the test process ends, however it ends, so no reaper is needed.
// testcontainers is configured for machines without its reaper image and
// that look like containers themselves: unless already set,
// TESTCONTAINERS_RYUK_DISABLED=true and TESTCONTAINERS_HOST_OVERRIDE=127.0.0.1
// are set in the process environment, which the program inherits (and so
// do tests that use testcontainers themselves after calling Image).
package pgtest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shoal-dev/shoal/internal/helperproc"
	"github.com/shoal-dev/shoal/migrations"
)

// LocalImage is the image scripts/postgres-image.sh builds.
const LocalImage = "shoal-postgres:15"

// OfficialImage is used when the local image is absent and cannot be built.
const OfficialImage = "postgres:15"

// ImageEnv names the environment variable that overrides the image.
const ImageEnv = "SHOAL_POSTGRES_IMAGE"

// Option configures a Server.
type Option func(*options)

type options struct {
	fsync bool
}

// WithFsync runs the server with fsync on, as in production. By default
// tests run with fsync off, like the testcontainers module, for speed.
func WithFsync() Option { return func(o *options) { o.fsync = true } }

// Server is one PostgreSQL container. Its methods are safe for concurrent use.
type Server struct {
	opts options

	mu        sync.Mutex
	started   bool
	skip      string // reason to skip, when Docker is unreachable
	err       error
	helper    *helperproc.Proc // runs the container; nil when none runs
	container string           // the container's ID
	dsn       string
	hostPort  string
	inRun     bool

	schemas atomic.Int64
}

// New returns a Server that starts its container on first use. Run must
// wrap the package's tests so the container is terminated.
func New(opts ...Option) *Server {
	s := &Server{}
	for _, o := range opts {
		o(&s.opts)
	}
	return s
}

// Run runs the tests and then terminates the container if one was started.
// Call it from TestMain: os.Exit(pg.Run(m)).
func (s *Server) Run(m *testing.M) int { return Main(m, s) }

// Main is Run for a package with several servers (say one with fsync on
// for benchmarks): it runs the tests and terminates every container started.
func Main(m *testing.M, servers ...*Server) int {
	for _, s := range servers {
		s.mu.Lock()
		s.inRun = true
		s.mu.Unlock()
	}
	code := m.Run()
	for _, s := range servers {
		if err := s.terminate(); err != nil {
			fmt.Fprintf(os.Stderr, "pgtest: terminate container: %v\n", err)
			if code == 0 {
				code = 1
			}
		}
	}
	return code
}

func (s *Server) terminate() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.helper == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var err error
	if s.container != "" {
		err = s.helper.Call(ctx, "terminate", map[string]string{"id": s.container}, nil)
	}
	// Closing the helper terminates the container too, should the call
	// have failed.
	err = errors.Join(err, s.helper.Close(ctx))
	s.helper, s.container = nil, ""
	return err
}

// Start starts a container owned by t: it is terminated when t ends. Use it
// for tests that stop and start the server.
func Start(t testing.TB, opts ...Option) *Server {
	t.Helper()
	s := New(opts...)
	s.inRun = true
	t.Cleanup(func() {
		if err := s.terminate(); err != nil {
			t.Errorf("pgtest: terminate container: %v", err)
		}
	})
	s.ensure(t)
	return s
}

// ensure starts the container once; it skips or fails t when it cannot.
func (s *Server) ensure(t testing.TB) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.inRun {
		t.Fatal("pgtest: the package's TestMain must call Server.Run (or use pgtest.Start)")
	}
	if !s.started {
		s.started = true
		s.skip, s.err = s.start(t)
	}
	if s.skip != "" {
		t.Skip(s.skip)
	}
	if s.err != nil {
		t.Fatalf("pgtest: %v", s.err)
	}
}

func (s *Server) start(t testing.TB) (skip string, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	helper, skip, err := startHelper(ctx)
	if skip != "" || err != nil {
		return skip, err
	}
	s.helper = helper // terminate closes it
	image, err := chooseImage(ctx, t, helper)
	if err != nil {
		return "", err
	}
	// A fixed host port keeps the DSN valid across a container stop and
	// start (Docker would otherwise map a new one). The helper runs the
	// container with database, user and password "shoal",
	// max_connections=300 and, unless WithFsync, fsync off.
	for attempt := 0; ; attempt++ {
		port, err := freePort()
		if err != nil {
			return "", err
		}
		var c struct{ ID, DSN string }
		err = helper.Call(ctx, "run", map[string]any{"image": image, "port": port, "fsync": s.opts.fsync}, &c)
		if err == nil {
			s.container, s.dsn, s.hostPort = c.ID, c.DSN, port
			break
		}
		if attempt == 2 {
			return "", fmt.Errorf("start %s: %w", image, err)
		}
	}
	return "", s.waitReady(ctx)
}

// startHelper starts the program that runs containers, and returns why
// tests skip when no Docker daemon is reachable.
func startHelper(ctx context.Context) (_ *helperproc.Proc, skip string, err error) {
	configureTestcontainers()
	helper, err := helperproc.Start("pgcontainer")
	if err != nil {
		return nil, "", err
	}
	var health struct{ Reason string }
	if err := helper.Call(ctx, "health", nil, &health); err != nil {
		_ = helper.Close(ctx)
		return nil, "", err
	}
	if health.Reason != "" {
		_ = helper.Close(ctx)
		return nil, fmt.Sprintf("pgtest: no Docker daemon reachable (%s); skipping PostgreSQL integration tests", health.Reason), nil
	}
	return helper, "", nil
}

// waitReady polls until the server accepts a query.
func (s *Server) waitReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	var last error
	for {
		conn, err := pgx.Connect(ctx, s.dsn)
		if err == nil {
			err = conn.Ping(ctx)
			_ = conn.Close(ctx)
			if err == nil {
				return nil
			}
		}
		last = err
		select {
		case <-ctx.Done():
			return fmt.Errorf("postgres not ready: %w", last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// WaitReady polls until the server accepts connections again, say after
// Container(t).Start; it fails t at the deadline of ctx.
func (s *Server) WaitReady(t testing.TB, ctx context.Context) {
	t.Helper()
	if err := s.waitReady(ctx); err != nil {
		t.Fatalf("pgtest: %v", err)
	}
}

// Container returns the running container, starting it if needed.
func (s *Server) Container(t testing.TB) *Container {
	t.Helper()
	s.ensure(t)
	return &Container{s: s}
}

// Container is the server's container, to stop and start it as an outage
// would. The server keeps its host port and DSN across a stop and start.
type Container struct{ s *Server }

// Stop stops the container, giving PostgreSQL timeout to shut down (nil:
// Docker's default) before it is killed.
func (c *Container) Stop(ctx context.Context, timeout *time.Duration) error {
	args := map[string]any{}
	if timeout != nil {
		args["timeout_ms"] = timeout.Milliseconds()
	}
	return c.call(ctx, "stop", args)
}

// Start starts the stopped container again. The server may accept
// connections only a little later: see Server.WaitReady.
func (c *Container) Start(ctx context.Context) error { return c.call(ctx, "start", map[string]any{}) }

func (c *Container) call(ctx context.Context, op string, args map[string]any) error {
	c.s.mu.Lock()
	helper, id := c.s.helper, c.s.container
	c.s.mu.Unlock()
	if helper == nil {
		return errors.New("pgtest: the container was terminated")
	}
	args["id"] = id
	if err := helper.Call(ctx, op, args, nil); err != nil {
		return fmt.Errorf("pgtest: %s container: %w", op, err)
	}
	return nil
}

// DSN returns the connection string of the server's database (schema public).
func (s *Server) DSN(t testing.TB) string {
	t.Helper()
	s.ensure(t)
	return s.dsn
}

// SchemaDSN creates an empty schema for t, dropped when t ends, and returns
// a connection string whose search_path is that schema.
func (s *Server) SchemaDSN(t testing.TB) string {
	t.Helper()
	base := s.DSN(t)
	schema := fmt.Sprintf("t%d_%d", os.Getpid(), s.schemas.Add(1))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		t.Fatalf("pgtest: connect: %v", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize()); err != nil {
		t.Fatalf("pgtest: create schema: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		conn, err := pgx.Connect(ctx, base)
		if err != nil {
			return // the server is gone (a fault test stopped it): nothing to clean
		}
		defer conn.Close(ctx)
		_, _ = conn.Exec(ctx, "DROP SCHEMA "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
	})
	u, err := url.Parse(base)
	if err != nil {
		t.Fatalf("pgtest: parse dsn: %v", err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String()
}

// MigratedDSN is SchemaDSN with the Shoal migrations applied.
func (s *Server) MigratedDSN(t testing.TB) string {
	t.Helper()
	dsn := s.SchemaDSN(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("pgtest: connect: %v", err)
	}
	defer conn.Close(ctx)
	if _, err := migrations.Apply(ctx, conn); err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	return dsn
}

// Pool returns a pool on a fresh, migrated schema, closed when t ends.
func (s *Server) Pool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	return NewPool(t, s.MigratedDSN(t), nil)
}

// EmptyPool returns a pool on a fresh schema without migrations.
func (s *Server) EmptyPool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	return NewPool(t, s.SchemaDSN(t), nil)
}

// NewPool opens a pool on dsn, lets configure adjust its config (may be
// nil), and closes it when t ends.
func NewPool(t testing.TB, dsn string, configure func(*pgxpool.Config)) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	if configure != nil {
		configure(cfg)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	t.Cleanup(pool.Close)
	return pool
}

var envOnce sync.Once

func configureTestcontainers() {
	envOnce.Do(func() {
		for k, v := range map[string]string{
			"TESTCONTAINERS_RYUK_DISABLED": "true",
			"TESTCONTAINERS_HOST_OVERRIDE": "127.0.0.1",
		} {
			if _, ok := os.LookupEnv(k); !ok {
				_ = os.Setenv(k, v)
			}
		}
	})
}

// chooseImage picks the image; when the local one is missing it runs
// scripts/postgres-image.sh (idempotent, locked against concurrent runs).
func chooseImage(ctx context.Context, t testing.TB, helper *helperproc.Proc) (string, error) {
	if img := os.Getenv(ImageEnv); img != "" {
		return img, nil
	}
	exists := func() (bool, error) {
		var r struct{ Exists bool }
		err := helper.Call(ctx, "image_exists", map[string]string{"image": LocalImage}, &r)
		return r.Exists, err
	}
	if ok, err := exists(); ok || err != nil {
		return LocalImage, err
	}
	if script := buildScript(); script != "" {
		t.Logf("pgtest: %s missing; building it with %s", LocalImage, script)
		out, err := exec.CommandContext(ctx, "bash", script).CombinedOutput()
		if err != nil {
			t.Logf("pgtest: %s failed: %v\n%s", script, err, out)
		}
		if ok, err := exists(); ok || err != nil {
			return LocalImage, err
		}
	}
	return OfficialImage, nil
}

// buildScript locates scripts/postgres-image.sh in the source tree.
func buildScript() string {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return ""
	}
	script := filepath.Join(filepath.Dir(file), "..", "..", "scripts", "postgres-image.sh")
	if _, err := os.Stat(script); err != nil {
		return ""
	}
	return script
}

// freePort picks a free loopback port below the kernel's ephemeral range.
// The container keeps it across a stop and start; while it is stopped, no
// socket of this or a parallel test process can be handed the port by the
// kernel (":0" listeners, outgoing connections and Docker's own port
// allocator all draw from the ephemeral range).
func freePort() (string, error) {
	const lowest = 10000
	if top := ephemeralLow(); top > lowest+1000 {
		for range 100 {
			port := strconv.Itoa(lowest + rand.IntN(top-lowest))
			if l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", port)); err == nil {
				l.Close()
				return port, nil
			}
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("pick a port: %w", err)
	}
	defer l.Close()
	return strconv.Itoa(l.Addr().(*net.TCPAddr).Port), nil
}

// ephemeralLow is the first port of the kernel's ephemeral range (Linux), or
// 0 when it cannot be read.
func ephemeralLow() int {
	data, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0
	}
	fields := strings.Fields(string(data))
	if len(fields) == 0 {
		return 0
	}
	n, _ := strconv.Atoi(fields[0])
	return n
}

// Image returns the Postgres image tests use (see the package doc),
// building the local one when it is missing, for tests that run Postgres
// in a container setup of their own (a network of several containers). It
// configures testcontainers as the package doc says, and skips t when no
// Docker daemon is reachable.
func Image(t testing.TB) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	helper, skip, err := startHelper(ctx)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	if skip != "" {
		t.Skip(skip)
	}
	image, err := chooseImage(ctx, t, helper)
	if cerr := helper.Close(ctx); err == nil && cerr != nil {
		err = cerr
	}
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	return image
}
