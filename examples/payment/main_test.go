package main

import (
	"bytes"
	"io"
	"strings"
	"testing"
	"time"
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
		`"state":"canceled","amount":1000`, // the read model caught up with both orders
		`"state":"failed","amount":2500`,
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

// The flag package takes a `quoted` word in a usage string as the flag's
// argument name; -h must name each flag's argument by its type.
func TestHelpNamesFlagArgumentsByType(t *testing.T) {
	var out, errOut bytes.Buffer
	_ = run(nil, []string{"-h"}, &out, &errOut)
	help := out.String() + errOut.String()
	if !strings.Contains(help, "-admin-addr string") {
		t.Fatalf("-h lacks %q:\n%s", "-admin-addr string", help)
	}
	if strings.Contains(help, "-admin-addr shoal") {
		t.Fatalf("-h names -admin-addr's argument after a quoted word:\n%s", help)
	}
}

// -clock-skew offsets the node's wall clock, not its durations.
func TestClockSkewFlag(t *testing.T) {
	o, err := parseArgs([]string{"-clock-skew", "-1h"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	before := time.Now()
	now := o.cfg.Clock.Now()
	if off := before.Sub(now); off < time.Hour-time.Minute || off > time.Hour {
		t.Fatalf("skewed clock reads %v at %v; want an hour behind", now, before)
	}
	if o, _ := parseArgs(nil, io.Discard); o.cfg.Clock != nil {
		t.Fatalf("clock %v without -clock-skew; want the default", o.cfg.Clock)
	}
}
