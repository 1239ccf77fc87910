package client

import (
	"context"
	"io"
	"strconv"

	"golang.org/x/sync/errgroup"

	"github.com/e31net/e31/pkg/events"
)

// PointTail is a point of a sweep whose member ended without success, and
// the last lines of that member's stderr (none if it wrote none, or never
// ran).
type PointTail struct {
	Index   int            `json:"index"`
	Job     string         `json:"job"`
	Outcome events.Outcome `json:"outcome"`
	Reason  string         `json:"reason,omitempty"`
	Stderr  []string       `json:"stderr"`
}

// FailedTails returns, for each point of a sweep whose member is over and
// did not succeed, the last n lines of the member's stderr (its last
// attempt's), in index order: what `e31 logs SWEEP --failed` shows. The
// logs are read several at once. It fails with ErrNoSuchJob if the id is
// no sweep of the asker's.
func (c *Client) FailedTails(ctx context.Context, sweep string, n int) ([]PointTail, error) {
	recs, err := c.sweepRecords(ctx, sweep)
	if err != nil {
		return nil, err
	}
	tails := []PointTail{}
	for _, r := range Points(recs) {
		if r.Sweep != nil && r.Over() && r.Outcome != events.Succeeded {
			tails = append(tails, PointTail{Index: r.Sweep.Index, Job: r.Job, Outcome: r.Outcome, Reason: r.Reason})
		}
	}
	byJob := map[string]int{}
	for i, t := range tails {
		byJob[t.Job] = i
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(8)
	for _, r := range recs {
		i, ok := byJob[r.Job]
		if !ok {
			continue
		}
		g.Go(func() error {
			tails[i].Stderr = c.StderrTail(gctx, r, n)
			if tails[i].Stderr == nil {
				tails[i].Stderr = []string{}
			}
			return gctx.Err()
		})
	}
	return tails, g.Wait()
}

// WriteTails writes each point's tail for people: a line that names the
// point, its member and how it ended, then the lines of stderr.
func WriteTails(w io.Writer, tails []PointTail) error {
	p := &printer{w: w}
	for _, t := range tails {
		line := "== [" + strconv.Itoa(t.Index) + "] " + t.Job + ": " + string(t.Outcome)
		if t.Reason != "" {
			line += ": " + t.Reason
		}
		p.printf("%s\n", line)
		if len(t.Stderr) == 0 {
			p.printf("(no stderr)\n")
		}
		for _, l := range t.Stderr {
			p.printf("%s\n", l)
		}
	}
	return p.err
}
