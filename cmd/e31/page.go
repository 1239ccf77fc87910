package main

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/e31net/e31/pkg/ops"
	"github.com/e31net/e31/pkg/web"
)

// newPage makes the operator's page (pkg/web) that the endpoints serve at /,
// reading the log as js, which must be the operator's. Its viewers log in
// with the token of --http-token-file (the operator) or one of
// --http-viewers; with neither, the page is open on loopback only (ops
// refuses any other address without a token).
func (o httpOptions) newPage(js jetstream.JetStream, log *slog.Logger) (*web.Page, error) {
	var token string
	if o.tokenFile != "" {
		var err error
		if token, err = ops.ReadToken(o.tokenFile); err != nil {
			return nil, usageErr("--http-token-file: %v", err)
		}
	}
	viewers, err := readViewers(o.viewersFile)
	if err != nil {
		return nil, usageErr("--http-viewers: %v", err)
	}
	return web.New(web.Config{JS: js, Token: token, Viewers: viewers, TraceURL: o.traceURL, Logger: log})
}

// readViewers reads a file of "NAME TOKEN" lines: who may log in to the
// page, and as whom (a submitter, or operator or auditor). Blank lines and
// lines starting with # are skipped.
func readViewers(file string) (map[string]string, error) {
	if file == "" {
		return nil, nil
	}
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string]string{}
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.Fields(line)
		if len(fields) != 2 {
			return nil, fmt.Errorf("%s:%d: want NAME TOKEN", file, n)
		}
		if _, dup := out[fields[1]]; dup {
			return nil, fmt.Errorf("%s:%d: a token given twice", file, n)
		}
		out[fields[1]] = fields[0]
	}
	return out, sc.Err()
}

// pageOnly is `e31 serve web`'s service: the page runs with the endpoints
// (serveEndpoints), so there is nothing else to do but wait.
type pageOnly struct{}

// Run waits until ctx ends.
func (pageOnly) Run(ctx context.Context) error {
	<-ctx.Done()
	return nil
}
