package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/shoal-dev/shoal/node/admin"
)

// APIError is an error answer of a node's admin API.
type APIError struct {
	Status int
	Code   admin.Code
	Msg    string
}

func (e *APIError) Error() string {
	return fmt.Sprintf("admin API: %d %s: %s", e.Status, e.Code, e.Msg)
}

// adminClient calls one node's admin API.
type adminClient struct {
	base  string
	token string
	http  *http.Client
}

// adminFlags are the flags of the commands that use the admin API.
type adminFlags struct {
	admin, token *string
	json         *bool
	timeout      *time.Duration
}

func newAdminFlags(fs *flag.FlagSet) adminFlags {
	return adminFlags{
		admin:   fs.String("admin", os.Getenv("SHOAL_ADMIN"), "base URL of a node's admin API ($SHOAL_ADMIN), e.g. http://127.0.0.1:9001"),
		token:   fs.String("token", os.Getenv("SHOAL_TOKEN"), "bearer token of the admin API ($SHOAL_TOKEN)"),
		json:    fs.Bool("json", false, "print JSON instead of a table"),
		timeout: fs.Duration("timeout", 30*time.Second, "give up after this long"),
	}
}

func (f adminFlags) client() (*adminClient, error) {
	if *f.admin == "" {
		return nil, fmt.Errorf("%w (no --admin or $SHOAL_ADMIN)", errUsage)
	}
	u, err := url.Parse(*f.admin)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("%w (--admin %q: want http://host:port)", errUsage, *f.admin)
	}
	return &adminClient{base: strings.TrimRight(*f.admin, "/"), token: *f.token, http: &http.Client{Timeout: *f.timeout}}, nil
}

// parseArgs parses flags placed before or after the positional arguments
// and returns those.
func parseArgs(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, errUsage
		}
		if fs.NArg() == 0 {
			return pos, nil
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

// call sends a request and returns the body of a 2xx answer; any other is
// an *APIError.
func (c *adminClient) call(ctx context.Context, method, path string, body any) ([]byte, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return nil, err
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode/100 != 2 {
		e := &APIError{Status: resp.StatusCode}
		var eb struct {
			Error string     `json:"error"`
			Code  admin.Code `json:"code"`
		}
		if json.Unmarshal(data, &eb) == nil && eb.Error != "" {
			e.Code, e.Msg = eb.Code, eb.Error
		} else {
			e.Msg = strings.TrimSpace(string(data))
		}
		return nil, e
	}
	return data, nil
}

func (c *adminClient) get(ctx context.Context, path string, out any) ([]byte, error) {
	data, err := c.call(ctx, http.MethodGet, path, nil)
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(data, out); err != nil {
		return nil, fmt.Errorf("admin API: %s: %w", path, err)
	}
	return data, nil
}

// printJSON prints an API answer indented.
func printJSON(w io.Writer, data []byte) error {
	var buf bytes.Buffer
	if err := json.Indent(&buf, data, "", "  "); err != nil {
		return err
	}
	buf.WriteByte('\n')
	_, err := w.Write(buf.Bytes())
	return err
}

// table prints rows aligned in columns, without trailing blanks.
func table(w io.Writer, header []string, rows [][]string) error {
	var buf bytes.Buffer
	tw := tabwriter.NewWriter(&buf, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(header, "\t"))
	for _, r := range rows {
		fmt.Fprintln(tw, strings.Join(r, "\t"))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	var out strings.Builder
	for line := range strings.Lines(buf.String()) {
		out.WriteString(strings.TrimRight(line, " \n"))
		out.WriteByte('\n')
	}
	_, err := io.WriteString(w, out.String())
	return err
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// adminCommand parses a subcommand's flags and its nargs non-empty
// positional arguments, and returns the client they describe.
func adminCommand(name string, args []string, nargs int, stderr io.Writer) (c *adminClient, pos []string, asJSON bool, err error) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	f := newAdminFlags(fs)
	pos, err = parseArgs(fs, args)
	if err != nil || len(pos) != nargs || slices.Contains(pos, "") {
		return nil, nil, false, errUsage
	}
	c, err = f.client()
	return c, pos, *f.json, err
}

func members(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c, _, asJSON, err := adminCommand("members", args, 0, stderr)
	if err != nil {
		return err
	}
	var m admin.Members
	data, err := c.get(ctx, "/admin/v1/members", &m)
	if err != nil {
		return err
	}
	if asJSON {
		return printJSON(stdout, data)
	}
	var rows [][]string
	for _, mem := range m.Members {
		var marks []string
		if mem.ID == m.Self {
			marks = append(marks, "self")
		}
		if mem.ID == m.Oldest {
			marks = append(marks, "oldest")
		}
		reach := "yes"
		switch {
		case mem.Status == "Down":
			reach = "-" // left or downed: nobody probes it any more
		case mem.Unreachable:
			reach = "NO"
		}
		rows = append(rows, []string{mem.ID, mem.Status, reach, strconv.FormatUint(mem.JoinOrder, 10),
			orDash(strings.Join(mem.Roles, ",")), orDash(mem.AppVersion), orDash(mem.TransportAddr), orDash(mem.GossipAddr),
			strings.Join(marks, ",")})
	}
	return table(stdout, []string{"MEMBER", "STATUS", "REACHABLE", "ORDER", "ROLES", "VERSION", "TRANSPORT", "GOSSIP", ""}, rows)
}

func shards(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c, pos, asJSON, err := adminCommand("shards", args, 1, stderr)
	if err != nil {
		return err
	}
	var st admin.Shards
	data, err := c.get(ctx, "/admin/v1/shards/"+url.PathEscape(pos[0]), &st)
	if err != nil {
		return err
	}
	if asJSON {
		return printJSON(stdout, data)
	}
	coord := "none"
	if st.Coordinator.Node != "" {
		coord = fmt.Sprintf("%s#%d (epoch %d)", st.Coordinator.Node, st.Coordinator.Incarnation, st.Coordinator.Epoch)
	}
	fmt.Fprintf(stdout, "type %s, coordinator %s, nodes %s\n", st.Type, coord, strings.Join(st.Nodes, " "))
	var rows [][]string
	for _, sh := range st.Shards {
		entities := "?"
		if sh.Entities >= 0 {
			entities = strconv.Itoa(sh.Entities)
		}
		rows = append(rows, []string{sh.ID, orDash(sh.Node), sh.State, entities})
	}
	return table(stdout, []string{"SHARD", "NODE", "STATE", "ENTITIES"}, rows)
}

func leave(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c, pos, asJSON, err := adminCommand("leave", args, 1, stderr)
	if err != nil {
		return err
	}
	data, err := c.act(ctx, "leave", "/admin/v1/leave", admin.LeaveRequest{Node: pos[0]})
	if err != nil {
		return err
	}
	if asJSON {
		return printJSON(stdout, data)
	}
	fmt.Fprintf(stdout, "%s is leaving the cluster\n", pos[0])
	return nil
}

// act posts an action; a 401 says which flag is missing.
func (c *adminClient) act(ctx context.Context, name, path string, body any) ([]byte, error) {
	data, err := c.call(ctx, http.MethodPost, path, body)
	var ae *APIError
	if errors.As(err, &ae) && ae.Status == http.StatusUnauthorized {
		return nil, fmt.Errorf("%w (%s needs --token or $SHOAL_TOKEN)", err, name)
	}
	return data, err
}

func types(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c, _, asJSON, err := adminCommand("types", args, 0, stderr)
	if err != nil {
		return err
	}
	var t struct {
		Types []string `json:"types"`
	}
	data, err := c.get(ctx, "/admin/v1/types", &t)
	if err != nil {
		return err
	}
	if asJSON {
		return printJSON(stdout, data)
	}
	rows := make([][]string, 0, len(t.Types))
	for _, name := range t.Types {
		rows = append(rows, []string{name})
	}
	return table(stdout, []string{"TYPE"}, rows)
}

func leases(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c, _, asJSON, err := adminCommand("leases", args, 0, stderr)
	if err != nil {
		return err
	}
	var l admin.Leases
	data, err := c.get(ctx, "/admin/v1/leases", &l)
	if err != nil {
		return err
	}
	if asJSON {
		return printJSON(stdout, data)
	}
	expiry := func(at time.Time, expired bool) string {
		s := at.UTC().Format(time.RFC3339)
		if expired {
			s += " EXPIRED"
		}
		return s
	}
	var rows [][]string
	for _, n := range l.Nodes {
		rows = append(rows, []string{"node", fmt.Sprintf("%s#%d", n.Node, n.Incarnation), "-", expiry(n.ExpiresAt, n.Expired)})
	}
	for _, co := range l.Coordinators {
		rows = append(rows, []string{"coordinator " + co.Type, orDash(co.Holder), strconv.FormatUint(co.Epoch, 10), expiry(co.ExpiresAt, co.Expired)})
	}
	return table(stdout, []string{"LEASE", "HOLDER", "EPOCH", "EXPIRES"}, rows)
}

func rebalance(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c, pos, asJSON, err := adminCommand("rebalance", args, 2, stderr)
	if err != nil {
		return err
	}
	data, err := c.act(ctx, "rebalance", "/admin/v1/shards/"+url.PathEscape(pos[0])+"/"+url.PathEscape(pos[1])+"/rebalance", nil)
	if err != nil {
		return err
	}
	if asJSON {
		return printJSON(stdout, data)
	}
	fmt.Fprintf(stdout, "shard %s of %s is handed off and placed again\n", pos[1], pos[0])
	return nil
}

func down(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c, pos, asJSON, err := adminCommand("down", args, 2, stderr)
	if err != nil {
		return err
	}
	inc, err := strconv.ParseUint(pos[1], 10, 64)
	if err != nil {
		return fmt.Errorf("%w (INCARNATION %q: want the number shown by members)", errUsage, pos[1])
	}
	data, err := c.act(ctx, "down", "/admin/v1/down", admin.DownRequest{Node: pos[0], Incarnation: &inc})
	if err != nil {
		return err
	}
	if asJSON {
		return printJSON(stdout, data)
	}
	fmt.Fprintf(stdout, "%s#%d is down: it fences itself, and its shards move once its lease expired\n", pos[0], inc)
	return nil
}
