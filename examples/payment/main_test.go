package main

import (
	"bytes"
	"io"
	"strings"
	"testing"
)

// The demo is the README's second command; it must keep working. Its
// timeouts are stretched fourfold so that a busy machine running the race
// detector still settles the first order within the ask timeout.
func TestDemo(t *testing.T) {
	if testing.Short() {
		t.Skip("the demo waits for its timeouts (about 8s stretched)")
	}
	var out bytes.Buffer
	if err := run(nil, []string{"-demo", "-demo-stretch", "4"}, &out, io.Discard); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	for _, want := range []string{
		"payment API listening on http://127.0.0.1:",
		"← 200",
		`← 500 {"code":"CODE-012"`,
		`← 400 {"code":"CODE-003"`,
		"the issuer received 3 requests",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("demo output lacks %q:\n%s", want, out.String())
		}
	}
}

func TestFlags(t *testing.T) {
	if err := run(nil, []string{"-nope"}, io.Discard, io.Discard); err == nil {
		t.Fatal("unknown flag accepted")
	}
	if err := run(nil, []string{"-demo", "-issuer-url", "http://127.0.0.1:1"}, io.Discard, io.Discard); err == nil {
		t.Fatal("-demo with -issuer-url accepted")
	}
	if err := run(nil, []string{"-demo", "-demo-stretch", "0"}, io.Discard, io.Discard); err == nil {
		t.Fatal("-demo-stretch 0 accepted")
	}
}
