package clustertest

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/moby/moby/client"
	"github.com/testcontainers/testcontainers-go"
)

// imageRepo is the repository of the images the tests build; the tag is
// a hash of the sources.
const imageRepo = "shoal-payment-test"

// mainModule is the module the image is built from; this package is a
// module of its own (see doc.go), nested in it.
const mainModule = "github.com/shoal-dev/shoal"

// repoRoot finds the main module's root above the working directory.
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if data, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && modulePath(data) == mainModule {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("clustertest: no go.mod of %s above the working directory", mainModule)
		}
		dir = parent
	}
}

// modulePath is the path on the module line of a go.mod file, or "".
func modulePath(gomod []byte) string {
	for line := range strings.Lines(string(gomod)) {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "module "); ok {
			return strings.Trim(strings.TrimSpace(rest), `"`)
		}
	}
	return ""
}

// sourceHash hashes what the image is built from: every Go file of the
// main module (tests and nested modules, this one among them, excluded),
// go.mod, go.sum and the Dockerfile.
func sourceHash(root string) (string, error) {
	var files []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path == root {
				return nil
			}
			// Nested modules (this one among them) are not in the image.
			if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil || strings.HasPrefix(name, ".") || name == "testdata" {
				return filepath.SkipDir
			}
			return nil
		}
		if (strings.HasSuffix(name, ".go") && !strings.HasSuffix(name, "_test.go")) || name == "go.mod" || name == "go.sum" || name == "Dockerfile" {
			files = append(files, path)
		}
		return nil
	})
	if err != nil {
		return "", err
	}
	slices.Sort(files)
	h := sha256.New()
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return "", err
		}
		rel, _ := filepath.Rel(root, f)
		fmt.Fprintf(h, "%s\x00%d\x00", rel, len(b))
		h.Write(b)
	}
	return hex.EncodeToString(h.Sum(nil))[:16], nil
}

// BuildImage returns the payment image of the current sources, building
// the static binaries (CGO_ENABLED=0) and the image of
// examples/payment/deploy/Dockerfile when no image of that hash exists.
// A file lock keeps concurrent test processes from building it twice.
func BuildImage(ctx context.Context, docker *testcontainers.DockerClient) (string, error) {
	root, err := repoRoot()
	if err != nil {
		return "", err
	}
	hash, err := sourceHash(root)
	if err != nil {
		return "", fmt.Errorf("clustertest: hash the sources: %w", err)
	}
	image := imageRepo + ":" + hash
	lock, err := os.OpenFile(filepath.Join(os.TempDir(), "shoal-clustertest-image.lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return "", err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return "", err
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN) //nolint:errcheck
	if _, err := docker.ImageInspect(ctx, image); err == nil {
		return image, nil
	}
	work, err := os.MkdirTemp("", "shoal-clustertest-build")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(work)
	for _, b := range []struct{ out, pkg string }{{"payment", "./examples/payment"}, {"loadgen", "./examples/payment/loadgen"}} {
		cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-o", filepath.Join(work, b.out), b.pkg)
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			return "", fmt.Errorf("clustertest: go build %s: %w\n%s", b.pkg, err, out)
		}
	}
	dockerfile, err := os.ReadFile(filepath.Join(root, "examples/payment/deploy/Dockerfile"))
	if err != nil {
		return "", err
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	add := func(name string, mode int64, data []byte) error {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: mode, Size: int64(len(data))}); err != nil {
			return err
		}
		_, err := tw.Write(data)
		return err
	}
	if err := add("Dockerfile", 0o644, dockerfile); err != nil {
		return "", err
	}
	for _, bin := range []string{"payment", "loadgen"} {
		data, err := os.ReadFile(filepath.Join(work, bin))
		if err != nil {
			return "", err
		}
		if err := add(bin, 0o755, data); err != nil {
			return "", err
		}
	}
	if err := tw.Close(); err != nil {
		return "", err
	}
	res, err := docker.ImageBuild(ctx, &buf, client.ImageBuildOptions{
		Tags: []string{image}, Remove: true, ForceRemove: true, Dockerfile: "Dockerfile",
		Labels: map[string]string{"dev.shoal.clustertest": "payment"},
	})
	if err != nil {
		return "", fmt.Errorf("clustertest: build %s: %w", image, err)
	}
	defer res.Body.Close()
	// The build's progress is a JSON stream; a failed step says so in it.
	dec := json.NewDecoder(res.Body)
	for {
		var msg struct {
			Error string `json:"error"`
		}
		if err := dec.Decode(&msg); err == io.EOF {
			break
		} else if err != nil {
			return "", fmt.Errorf("clustertest: build %s: %w", image, err)
		}
		if msg.Error != "" {
			return "", fmt.Errorf("clustertest: build %s: %s", image, msg.Error)
		}
	}
	if _, err := docker.ImageInspect(ctx, image); err != nil {
		return "", fmt.Errorf("clustertest: built %s but cannot find it: %w", image, err)
	}
	removeOlderImages(ctx, docker, image)
	return image, nil
}

// removeOlderImages removes the images of earlier sources, best effort:
// one in use by a container stays (no force).
func removeOlderImages(ctx context.Context, docker *testcontainers.DockerClient, keep string) {
	list, err := docker.ImageList(ctx, client.ImageListOptions{Filters: make(client.Filters).Add("label", "dev.shoal.clustertest=payment")})
	if err != nil {
		return
	}
	for _, img := range list.Items {
		for _, tag := range img.RepoTags {
			if tag != keep {
				// By tag: an image that also carries keep only loses the tag.
				_, _ = docker.ImageRemove(ctx, tag, client.ImageRemoveOptions{PruneChildren: true})
			}
		}
	}
}
