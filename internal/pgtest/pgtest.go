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
// testcontainers is configured for machines without its reaper image and
// that look like containers themselves: unless already set,
// TESTCONTAINERS_RYUK_DISABLED=true and TESTCONTAINERS_HOST_OVERRIDE=127.0.0.1
// are set in the process environment (containers are terminated by Run or
// t.Cleanup instead of the reaper).
package pgtest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
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
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/network"
	"github.com/testcontainers/testcontainers-go"
	tclog "github.com/testcontainers/testcontainers-go/log"
	tcpostgres "github.com/testcontainers/testcontainers-go/modules/postgres"

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
	container *tcpostgres.PostgresContainer
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
	if s.container == nil {
		return nil
	}
	err := testcontainers.TerminateContainer(s.container)
	s.container = nil
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
	configureTestcontainers()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()

	if reason := dockerUnavailable(ctx); reason != "" {
		return reason, nil
	}
	image, err := chooseImage(ctx, t)
	if err != nil {
		return "", err
	}
	// A fixed host port keeps the DSN valid across a container stop and
	// start (Docker would otherwise map a new one).
	for attempt := 0; ; attempt++ {
		port, err := freePort()
		if err != nil {
			return "", err
		}
		c, err := s.run(ctx, image, port)
		if err == nil {
			s.container, s.hostPort = c, port
			break
		}
		if c != nil {
			_ = testcontainers.TerminateContainer(c)
		}
		if attempt == 2 {
			return "", fmt.Errorf("start %s: %w", image, err)
		}
	}
	dsn, err := s.container.ConnectionString(ctx, "sslmode=disable")
	if err != nil {
		return "", fmt.Errorf("connection string: %w", err)
	}
	s.dsn = dsn
	return "", s.waitReady(ctx)
}

func (s *Server) run(ctx context.Context, image, port string) (*tcpostgres.PostgresContainer, error) {
	opts := []testcontainers.ContainerCustomizer{
		testcontainers.WithLogger(tclog.NewNoopLogger()),
		tcpostgres.WithDatabase("shoal"),
		tcpostgres.WithUsername("shoal"),
		tcpostgres.WithPassword("shoal"),
		testcontainers.WithHostConfigModifier(func(hc *container.HostConfig) {
			hc.PortBindings = network.PortMap{
				network.MustParsePort("5432/tcp"): {{HostIP: netip.MustParseAddr("127.0.0.1"), HostPort: port}},
			}
		}),
		tcpostgres.BasicWaitStrategies(),
	}
	cmd := []string{"postgres", "-c", "max_connections=300"}
	if !s.opts.fsync {
		cmd = append(cmd, "-c", "fsync=off")
	}
	opts = append(opts, testcontainers.WithCmd(cmd...))
	return tcpostgres.Run(ctx, image, opts...)
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
// Container().Start; it fails t at the deadline of ctx.
func (s *Server) WaitReady(t testing.TB, ctx context.Context) {
	t.Helper()
	if err := s.waitReady(ctx); err != nil {
		t.Fatalf("pgtest: %v", err)
	}
}

// Container returns the running container, starting it if needed.
func (s *Server) Container(t testing.TB) *tcpostgres.PostgresContainer {
	t.Helper()
	s.ensure(t)
	return s.container
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

// dockerUnavailable returns why Docker cannot be used, or "".
func dockerUnavailable(ctx context.Context) (reason string) {
	defer func() {
		if r := recover(); r != nil {
			reason = fmt.Sprintf("pgtest: no Docker daemon reachable (%v); skipping PostgreSQL integration tests", r)
		}
	}()
	provider, err := testcontainers.NewDockerProvider(testcontainers.WithLogger(tclog.NewNoopLogger()))
	if err == nil {
		err = provider.Health(ctx)
	}
	if err != nil {
		return fmt.Sprintf("pgtest: no Docker daemon reachable (%v); skipping PostgreSQL integration tests", err)
	}
	return ""
}

// chooseImage picks the image; when the local one is missing it runs
// scripts/postgres-image.sh (idempotent, locked against concurrent runs).
func chooseImage(ctx context.Context, t testing.TB) (string, error) {
	if img := os.Getenv(ImageEnv); img != "" {
		return img, nil
	}
	if imageExists(ctx, LocalImage) {
		return LocalImage, nil
	}
	if script := buildScript(); script != "" {
		t.Logf("pgtest: %s missing; building it with %s", LocalImage, script)
		out, err := exec.CommandContext(ctx, "bash", script).CombinedOutput()
		if err != nil {
			t.Logf("pgtest: %s failed: %v\n%s", script, err, out)
		}
		if imageExists(ctx, LocalImage) {
			return LocalImage, nil
		}
	}
	return OfficialImage, nil
}

func imageExists(ctx context.Context, image string) bool {
	cli, err := testcontainers.NewDockerClientWithOpts(ctx)
	if err != nil {
		return false
	}
	defer cli.Close()
	_, err = cli.ImageInspect(ctx, image)
	return err == nil
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
	configureTestcontainers()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if reason := dockerUnavailable(ctx); reason != "" {
		t.Skip(reason)
	}
	image, err := chooseImage(ctx, t)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	return image
}
