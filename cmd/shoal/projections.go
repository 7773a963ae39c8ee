package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"

	"github.com/shoal-dev/shoal/node/admin"
)

// projections lists every projection instance a node's admin API reports
// (the same on every node: they are read from the offset store).
func projections(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c, _, asJSON, err := adminCommand("projections", args, 0, stderr)
	if err != nil {
		return err
	}
	var list admin.ProjectionList
	data, err := c.get(ctx, "/admin/v1/projections", &list)
	if err != nil {
		return err
	}
	if asJSON {
		return printJSON(stdout, data)
	}
	var rows [][]string
	for _, p := range list.Projections {
		for _, in := range p.Instances {
			lag := fmt.Sprintf("%.1fs", in.LagSeconds)
			if in.LagEvents != nil {
				lag += fmt.Sprintf(" / %d events", *in.LagEvents)
			}
			paused := "no"
			if in.Paused {
				paused = "yes"
			}
			rows = append(rows, []string{p.Name, in.Instance, orDash(in.Node), in.Offset, lag, paused})
		}
	}
	return table(stdout, []string{"NAME", "INSTANCE", "NODE", "OFFSET", "LAG", "PAUSED"}, rows)
}

// projectionOp asks for an operation on one projection instance:
// projection pause|resume|rebuild|reset NAME INSTANCE [--offset X].
func projectionOp(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return errUsage
	}
	op := admin.ProjectionOp(args[0])
	switch op {
	case admin.ProjectionPause, admin.ProjectionResume, admin.ProjectionRebuild, admin.ProjectionReset:
	default:
		return fmt.Errorf("%w (unknown projection operation %q)", errUsage, args[0])
	}
	fs := flag.NewFlagSet("projection "+args[0], flag.ContinueOnError)
	fs.SetOutput(stderr)
	f := newAdminFlags(fs)
	offset := fs.String("offset", "", `reset's target: a journal offset, or "start"`)
	pos, err := parseArgs(fs, args[1:])
	if err != nil || len(pos) != 2 || pos[0] == "" || pos[1] == "" {
		return errUsage
	}
	var body any
	switch {
	case op == admin.ProjectionReset && *offset == "":
		return fmt.Errorf("%w (reset needs --offset)", errUsage)
	case op == admin.ProjectionReset:
		body = admin.ProjectionResetRequest{Offset: *offset}
	case *offset != "":
		return fmt.Errorf("%w (--offset is for reset)", errUsage)
	}
	c, err := f.client()
	if err != nil {
		return err
	}
	path := "/admin/v1/projections/" + url.PathEscape(pos[0]) + "/" + url.PathEscape(pos[1]) + "/" + string(op)
	data, err := c.call(ctx, http.MethodPost, path, body)
	if err != nil {
		var ae *APIError
		if errors.As(err, &ae) && ae.Status == http.StatusUnauthorized {
			return fmt.Errorf("%w (projection %s needs --token or $SHOAL_TOKEN)", err, op)
		}
		return err
	}
	if *f.json {
		return printJSON(stdout, data)
	}
	fmt.Fprintf(stdout, "%s of %s %s requested (request %s); the instance's node applies it at its next lease renewal\n",
		op, pos[0], pos[1], requestID(data))
	return nil
}

func requestID(data []byte) string {
	var req admin.ProjectionRequest
	if err := json.Unmarshal(data, &req); err != nil || req.ID == 0 {
		return "?"
	}
	return strconv.FormatInt(req.ID, 10)
}
