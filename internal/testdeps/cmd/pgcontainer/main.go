// Command pgcontainer runs PostgreSQL containers for internal/pgtest of the
// main module, which keeps testcontainers out of the main module's
// dependencies by asking this program instead. It speaks the JSON-lines
// protocol of package jsonlines on stdin and stdout:
//
//	health                          → {"reason": why Docker is unusable, or ""}
//	image_exists {image}            → {"exists": bool}
//	run {image, port, fsync}        → {"id", "dsn"}: a container with 5432 on 127.0.0.1:port
//	stop {id, timeout_ms}           stops it (timeout_ms omitted: Docker's default)
//	start {id}                      starts it again
//	terminate {id}                  removes it
//
// When its stdin closes (the test process ended, however it ended) or it
// gets SIGINT or SIGTERM, it terminates every container it ran and exits:
// no reaper container is needed.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/network"
	"github.com/testcontainers/testcontainers-go"
	tclog "github.com/testcontainers/testcontainers-go/log"
	tcpostgres "github.com/testcontainers/testcontainers-go/modules/postgres"

	"github.com/shoal-dev/shoal/internal/testdeps/jsonlines"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	h := &helper{containers: map[string]*tcpostgres.PostgresContainer{}}
	err := jsonlines.Serve(ctx, os.Stdin, os.Stdout, h.handle)
	h.terminateAll()
	if err != nil && ctx.Err() == nil {
		fmt.Fprintf(os.Stderr, "pgcontainer: %v\n", err)
		os.Exit(1)
	}
}

type helper struct {
	mu         sync.Mutex
	containers map[string]*tcpostgres.PostgresContainer // by container ID
}

type (
	imageArgs struct {
		Image string `json:"image"`
	}
	runArgs struct {
		Image string `json:"image"`
		Port  string `json:"port"`
		Fsync bool   `json:"fsync"`
	}
	idArgs struct {
		ID        string `json:"id"`
		TimeoutMS *int64 `json:"timeout_ms,omitempty"`
	}
)

func (h *helper) handle(ctx context.Context, op string, args json.RawMessage) (any, error) {
	switch op {
	case "health":
		return map[string]string{"reason": dockerUnavailable(ctx)}, nil
	case "image_exists":
		a, err := jsonlines.Decode[imageArgs](args)
		if err != nil {
			return nil, err
		}
		return map[string]bool{"exists": imageExists(ctx, a.Image)}, nil
	case "run":
		a, err := jsonlines.Decode[runArgs](args)
		if err != nil {
			return nil, err
		}
		return h.run(ctx, a)
	case "stop", "start", "terminate":
		a, err := jsonlines.Decode[idArgs](args)
		if err != nil {
			return nil, err
		}
		h.mu.Lock()
		c := h.containers[a.ID]
		if op == "terminate" {
			delete(h.containers, a.ID)
		}
		h.mu.Unlock()
		if c == nil {
			return nil, fmt.Errorf("no container %s", a.ID)
		}
		switch op {
		case "stop":
			var timeout *time.Duration
			if a.TimeoutMS != nil {
				d := time.Duration(*a.TimeoutMS) * time.Millisecond
				timeout = &d
			}
			return nil, c.Stop(ctx, timeout)
		case "start":
			return nil, c.Start(ctx)
		default:
			return nil, testcontainers.TerminateContainer(c)
		}
	}
	return nil, fmt.Errorf("%w %q", jsonlines.ErrUnknownOp, op)
}

// run starts a container as internal/pgtest always has: database, user and
// password "shoal", max_connections=300, fsync off unless asked for, and
// 5432 published on a fixed loopback port, so the DSN survives a stop and
// start (Docker would otherwise map a new port).
func (h *helper) run(ctx context.Context, a runArgs) (any, error) {
	opts := []testcontainers.ContainerCustomizer{
		testcontainers.WithLogger(tclog.NewNoopLogger()),
		tcpostgres.WithDatabase("shoal"),
		tcpostgres.WithUsername("shoal"),
		tcpostgres.WithPassword("shoal"),
		testcontainers.WithHostConfigModifier(func(hc *container.HostConfig) {
			hc.PortBindings = network.PortMap{
				network.MustParsePort("5432/tcp"): {{HostIP: netip.MustParseAddr("127.0.0.1"), HostPort: a.Port}},
			}
		}),
		tcpostgres.BasicWaitStrategies(),
	}
	cmd := []string{"postgres", "-c", "max_connections=300"}
	if !a.Fsync {
		cmd = append(cmd, "-c", "fsync=off")
	}
	opts = append(opts, testcontainers.WithCmd(cmd...))
	c, err := tcpostgres.Run(ctx, a.Image, opts...)
	if err != nil {
		if c != nil {
			_ = testcontainers.TerminateContainer(c)
		}
		return nil, err
	}
	h.mu.Lock()
	h.containers[c.GetContainerID()] = c
	h.mu.Unlock()
	dsn, err := c.ConnectionString(ctx, "sslmode=disable")
	if err != nil {
		return nil, fmt.Errorf("connection string: %w", err)
	}
	return map[string]string{"id": c.GetContainerID(), "dsn": dsn}, nil
}

func (h *helper) terminateAll() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for id, c := range h.containers {
		if err := testcontainers.TerminateContainer(c); err != nil {
			fmt.Fprintf(os.Stderr, "pgcontainer: terminate %s: %v\n", id, err)
		}
		delete(h.containers, id)
	}
}

// dockerUnavailable returns why Docker cannot be used, or "".
func dockerUnavailable(ctx context.Context) (reason string) {
	defer func() {
		if r := recover(); r != nil {
			reason = fmt.Sprint(r)
		}
	}()
	provider, err := testcontainers.NewDockerProvider(testcontainers.WithLogger(tclog.NewNoopLogger()))
	if err == nil {
		err = provider.Health(ctx)
	}
	if err != nil {
		return err.Error()
	}
	return ""
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
